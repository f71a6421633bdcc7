"""Bug finding for any predictions file, and the ood-levels orchestration (training replaced by a
stand-in whose accuracies are known, so curves, knee, agreement and the written files can be checked)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from metashift_hf.cli import main
from metashift_hf.core.errors import MetashiftError, UnknownNameError
from metashift_hf.hub import api
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.research import ood_experiments
from metashift_hf.research.bugs import find_bugs
from metashift_hf.research.train import TrainConfig
from metashift_hf.scoring.per_group import PER_GROUP_COLUMNS


TASK = "shift-conditional-cat-dog-delta30"


def _predictions(tp, wrong_context: str, cls: str) -> pd.DataFrame:
    """Every image right except the test images of ``cls`` holding ``wrong_context``."""
    other = {c: [d for d in tp.classes if d != c][0] for c in tp.classes}
    rows = []
    for split, rs in tp.splits.items():
        for r in rs:
            bad = split == "test" and r.label == cls and wrong_context in r.contexts
            rows.append({"image_id": r.image_id, "prediction": other[r.label] if bad else r.label})
    return pd.DataFrame(rows)


def test_bugs_find_the_planted_context(builder_world, tmp_path, capsys):
    art = builder_world["artifact"]
    tp = api.plan(TaskRef(TASK, artifact=art.root))
    test_cat = [r for r in tp.splits["test"] if r.label == "cat"]
    counts = pd.Series([c for r in test_cat for c in r.contexts]).value_counts()
    target = counts.index[0]  # the largest context of the test cats: all of it predicted wrong
    preds = _predictions(tp, target, "cat")
    report = find_bugs(preds, TaskRef(TASK, artifact=art.root), min_n=5)
    harmful = report.harmful()
    assert f"cat({target})" in [h["subset"] for h in harmful["cat"]]
    assert all(h["accuracy"] < h["rest_accuracy"] for rows in harmful.values() for h in rows)
    dists = [h["distance_to_largest_community"] for h in harmful["cat"]]
    known = [d for d in dists if d is not None]
    assert known == sorted(known) and dists[: len(known)] == known  # nearest first, unknown last
    path = tmp_path / "p.csv"
    preds.to_csv(path, index=False)
    out = tmp_path / "bugs"
    assert (
        main(
            [
                "bugs",
                "--task",
                TASK,
                "--artifact",
                str(art.root),
                "--predictions",
                str(path),
                "--min-n",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert f"cat({target})" in capsys.readouterr().out
    d = json.loads((out / "bugs.json").read_text())
    assert d["n_bugs"] >= 1 and d["split"] == "test"
    # bugs writes the one per_group.csv schema; its tested context rows are bugs.json's tests
    groups = pd.read_csv(out / "per_group.csv", keep_default_na=False, dtype={"name": str, "class": str})
    assert list(groups.columns) == list(PER_GROUP_COLUMNS)
    bug_rows = groups[(groups["level"] == "context") & (groups["bug"].astype(str) == "True")]
    assert sorted(bug_rows["name"]) == sorted(t["subset"] for t in d["tested"] if t["bug"])
    assert set(groups.loc[groups["level"] == "all", "name"]) == {"overall", "test"}
    with pytest.raises(UnknownNameError):
        find_bugs(preds, TaskRef(TASK, artifact=art.root), split="nope")
    with pytest.raises(MetashiftError):  # a prediction for an image outside the task
        find_bugs(
            pd.concat([preds, pd.DataFrame([{"image_id": "zzz", "prediction": "cat"}])]),
            TaskRef(TASK, artifact=art.root),
        )


def test_model_specs():
    assert ood_experiments.ModelSpec.parse("erm").name == "erm"
    assert ood_experiments.ModelSpec.parse("groupdro:finetune").probe == "finetune"
    with pytest.raises(UnknownNameError):
        ood_experiments.ModelSpec.parse("ern")


def fake_train(ref, *a, config=None, **k):
    """Stand-in training: OOD accuracy 0.9 - distance - delta (+0.3 x mixed fraction), ID 0.9; groupdro +0.05."""
    cfg = a[1] if len(a) > 1 else config  # train(task, out, config)
    lev = ref.plan.spec.level  # the level task, opened (TaskData)
    ood = 0.9 - (lev.distance or 0) - (lev.delta or 0) + 0.3 * lev.mixed_fraction
    ood += 0.05 if cfg.method == "groupdro" else 0
    idv = 0.9 + (0.05 if cfg.method == "groupdro" else 0)
    m = lambda v: {"mean": v, "std": 0.0}  # noqa: E731
    shifted = ref.plan.spec.shift_type != "none"  # as the scores: no ID/OOD pair where a level declares no shift
    agg = {
        "id": m(idv if shifted else None),
        "ood": m(ood if shifted else None),
        "drop_pct": m(100 * (idv - ood) / idv if shifted else None),
        "n_seeds": 2,
        "splits": {"test": {"average": m(ood), "worst_group": m(ood - 0.1)}, "id_test": {"average": m(idv)}},
    }
    return SimpleNamespace(aggregate=lambda: agg)


def stand_in_backbone(**k):
    return SimpleNamespace(card=lambda: {"name": "stand-in"})


def test_ood_levels_orchestration(builder_world, tmp_path, monkeypatch):
    monkeypatch.setattr(ood_experiments, "train", fake_train)
    monkeypatch.setattr(ood_experiments, "load_backbone", stand_in_backbone)
    out = tmp_path / "ood"
    origin = TaskOrigin(artifact=builder_world["artifact"].root, images=builder_world["folder"])
    r = ood_experiments.ood_levels(
        origin,
        out,
        ood_experiments.OodLevelsConfig(
            shift_type="marginal", models=("erm", "groupdro"), training=TrainConfig(seeds=2)
        ),
    )
    assert {p.name for p in out.iterdir()} >= {"results.json", "results.md", "levels.csv", "curves.png"}
    assert r["backbone"] == {"name": "stand-in"}  # its crop rule dates stored figures (scripts/docs_figures.py)
    curves = {(c["model"], c["curve"]): c for c in r["curves"]}
    main_curve = curves[("erm", "ood")]
    assert main_curve["slope"] == pytest.approx(-1.0)  # accuracy falls one for one with d
    assert curves[("erm", "mix")]["slope"] == pytest.approx(0.3)
    d = main_curve["x"]
    knee = next((i for i in range(1, len(d)) if 0.9 - d[i] < 0.9 * (0.9 - d[0])), None)
    assert main_curve["knee"] == (None if knee is None else f"d{knee}")
    assert r["agreement"]["per_level"][0]["kendall_tau"] == pytest.approx(1.0)
    # two models: n = 2 per level, no p-value, no correlation over the dependent (model, level) points
    assert all(a["n_models"] == 2 and a["kendall_p"] is None for a in r["agreement"]["per_level"])
    assert r["agreement"]["pooled"]["n_models"] == 2 and r["agreement"]["pooled"]["p_value"] is None
    md = (out / "results.md").read_text()
    assert "no p-value below 5 models" in md and ", p - (no p-value with 2 models" in md
    table = pd.read_csv(out / "levels.csv")
    assert len(table) == 2 * 7 and set(table["level"]) >= {"d0", "d3", "d3-mix50"}
    with pytest.raises(MetashiftError):  # --out now holds an experiment: replaced only with force
        ood_experiments.ood_levels(origin, out)


def test_experiment_cli_conditional(builder_world, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ood_experiments, "train", fake_train)
    monkeypatch.setattr(ood_experiments, "load_backbone", stand_in_backbone)
    out = tmp_path / "cond"
    assert (
        main(
            [
                "experiment",
                "ood-levels",
                "--artifact",
                str(builder_world["artifact"].root),
                "--images",
                str(builder_world["folder"]),
                "--type",
                "conditional",
                "--models",
                "erm",
                "groupdro",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "balanced" in printed and "reversed" in printed
    r = json.loads((out / "results.json").read_text())
    bal = next(c for c in r["curves"] if c["model"] == "erm" and c["curve"] == "balanced")
    assert bal["slope"] == pytest.approx(-1.0) and bal["x"] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.49]
    assert bal["knee"] == "delta10"  # 0.8 < 0.9 * 0.9
    # the control level declares no shift (issue 38.2) and is still the curve's first point, with ID and OOD
    control = next(x for x in r["levels"] if x["level"] == "delta00" and x["model"] == "erm")
    assert control["ood"] == pytest.approx(0.9) and control["id"] == pytest.approx(0.9) and bal["ood"][0] == 0.9


def test_clustered_orchestration(builder_world, tmp_path, monkeypatch):
    """The clustered experiment end to end on a small world (features and training stood in): each D_k
    is a typed, leak-free task plan whose test split holds every other cluster."""
    rng = np.random.default_rng(0)
    feats: dict[str, np.ndarray] = {}
    plans = []

    def fake_features(ids, images, **k):
        return SimpleNamespace(rows=lambda wanted: np.stack([feats.setdefault(i, rng.normal(size=4)) for i in wanted]))

    def fake_cluster_train(ref, *a, **k):
        tp = ref.task  # a TaskRef of the planned task
        plans.append(tp)
        m = lambda v: {"mean": v, "std": 0.0}  # noqa: E731
        groups = sorted({(r.group, sum(x.group == r.group for x in tp.splits["test"])) for r in tp.splits["test"]})
        agg = {
            "id": m(0.8),
            "ood": m(0.6),
            "splits": {"test": {"worst_group": m(0.4)}},
            "per_group": [{"split": "test", "group": g, "n": n, "mean": 0.6} for g, n in groups],
        }
        return SimpleNamespace(aggregate=lambda: agg)

    monkeypatch.setattr(
        ood_experiments, "load_backbone", lambda **k: SimpleNamespace(card=lambda: {"name": "stand-in"})
    )
    monkeypatch.setattr(ood_experiments, "image_features", fake_features)
    monkeypatch.setattr(ood_experiments, "train", fake_cluster_train)
    out = tmp_path / "clustered"
    origin = TaskOrigin(artifact=builder_world["artifact"].root, images=builder_world["folder"])
    r = ood_experiments.clustered(origin, out, ood_experiments.ClusteredConfig(k=3, training=TrainConfig(seeds=1)))
    assert {p.name for p in out.iterdir()} >= {"results.json", "results.md", "clusters.csv", "assignments.csv"}
    assert [row["k"] for row in r["per_k"]] == [0, 1, 2] and len(plans) == 3
    for kk, tp in enumerate(plans):
        assert tp.spec.shift_type == "clustered" and tp.spec.task_id == f"clustered-cat-dog-k{kk}"
        assert {r.group for r in tp.splits["train"]} == {f"cat(cluster-{kk})", f"dog(cluster-{kk})"}
        assert all(not r.group.endswith(f"(cluster-{kk})") for r in tp.splits["test"])
        rows = [r for v in tp.splits.values() for r in v]  # the group fields' one meaning (tasks.shifts.Row)
        assert all(r.group == f"{r.label}({r.context})" and (r.community >= 0 or not r.contexts) for r in rows)
        assert sum(tp.spec.split_sizes.values()) == sum(len(v) for v in tp.splits.values())
        assert json.loads(tp.spec.to_json())["shift_type"] == "clustered"
    assert all(0.0 <= c["mi_bits"] <= c["h_cluster_bits"] + 1e-9 for c in r["per_class"])
