"""`metashift-hf evaluate` on a matched task of a small built artifact: plan without images,
predictions file, context bugs with meta-graph distances, ID vs OOD, CLI errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from metashift_hf.cli import main
from metashift_hf.core.errors import MetashiftError
from metashift_hf.hub.task_data import TaskRef


@pytest.fixture(scope="module")
def matched(tmp_path_factory):
    """dog: contexts ball/bench/chair (one community) and boat/car/truck (another); cat: six contexts."""
    from metashift_hf.builders.build import BuildOptions, build_artifact
    from metashift_hf.builders.subsets import CandidateSubsets

    subsets = {}
    for k, ctx in enumerate(["ball", "bench", "chair"]):
        subsets[f"dog({ctx})"] = [f"d{i}" for i in range(15 * k, 15 * k + 40)]
    for k, ctx in enumerate(["boat", "car", "truck"]):
        subsets[f"dog({ctx})"] = [
            f"d{i}" for i in range(60 + 15 * k, 60 + 15 * k + 40)
        ]  # boat meets chair: one meta-graph
    for k, ctx in enumerate(["sofa", "bed", "chair", "table", "car", "bench"]):
        subsets[f"cat({ctx})"] = [f"c{i}" for i in range(10 * k, 10 * k + 35)]
    root = tmp_path_factory.mktemp("evalart") / "artifact"
    art = build_artifact(CandidateSubsets.from_dict(subsets), root, BuildOptions(), plots=False)
    try:
        from metashift_hf.tasks.match_artifact import MatchInputs, run_match

        run_match(MatchInputs(artifact=str(root), hierarchy="wordnet"))
    except MetashiftError as exc:  # WordNet dict files absent on this machine
        pytest.skip(f"wordnet_match unavailable: {exc.what}")
    assert art.communities("dog")["dog(boat)"] != art.communities("dog")["dog(ball)"]
    return root


def _predictions(path, ids):
    # cats -> tabby (281, correct); dogs only in boat/car/truck (d70..) -> plate (923, wrong);
    # the other dogs -> golden retriever (207, correct)
    top1 = [281 if i.startswith("c") else (923 if int(i[1:]) >= 70 else 207) for i in ids]
    pd.DataFrame({"image_id": ids, "imagenet_index": top1}).to_csv(path, index=False)


def test_cli_predictions_on_matched_task(matched, tmp_path, capsys):
    from metashift_hf.hub import api

    plan = api.plan(TaskRef("bin-cat-dog", artifact=matched))
    table = plan.table()
    _predictions(tmp_path / "p.csv", sorted(set(table.image_id)))
    out = tmp_path / "eval"
    rc = main(
        [
            "evaluate",
            "--model",
            f"predictions:{tmp_path / 'p.csv'}",
            "--task",
            "bin-cat-dog",
            "--artifact",
            str(matched),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "context bugs" in printed and str(out / "report.md") in printed
    rep = json.loads((out / "report.json").read_text())
    assert rep["run"]["task_id"] == "bin-cat-dog" and rep["run"]["shift_type"] == plan.spec.shift_type
    assert rep["run"]["artifact_hash"] and len(rep["run"]["task_content_hash"]) == 64
    # expected numbers straight from the plan
    wrong = table.label.eq("dog") & table.image_id.str[1:].astype(int).ge(70)
    assert rep["overall"]["n"] == len(table) and rep["overall"]["correct"] == int((~wrong).sum())
    ood_split = "test"
    id_split = "id_test" if "id_test" in plan.splits else "validation"
    gap = rep["id_vs_ood"]
    assert (gap["id_split"], gap["ood_split"]) == (id_split, ood_split)
    acc = lambda s: float((~wrong[table.split == s]).mean())
    assert gap["id"]["accuracy"] == pytest.approx(acc(id_split)) and gap["ood"]["accuracy"] == pytest.approx(
        acc(ood_split)
    )
    assert gap["gap"] == pytest.approx(acc(id_split) - acc(ood_split))
    # the three dog contexts of the other community are the bugs, each with its distance to community 0
    bugs = {b["subset"]: b for b in rep["context_bugs"]}
    assert set(bugs) == {"dog(boat)", "dog(car)", "dog(truck)"}
    for b in bugs.values():
        assert b["accuracy"] < 0.3 and b["q_value"] < 0.05 and b["community"] == 1
        assert b["distance_to_largest_community"] is not None and b["distance_to_largest_community"] > 0
    groups = pd.read_csv(out / "per_group.csv", keep_default_na=False, dtype={"name": str})
    comm = groups[(groups.level == "community") & (groups["class"] == "dog")].set_index("name")
    assert float(comm.at["dog/1", "accuracy"]) < 0.3 and float(comm.at["dog/0", "accuracy"]) > 0.9
    assert {"cat.png", "dog.png"} <= {p.name for p in (out / "plots").iterdir()}


def test_cli_errors(matched, tmp_path, capsys):
    pd.DataFrame({"image_id": ["c1"], "imagenet_index": [281]}).to_csv(tmp_path / "few.csv", index=False)
    rc = main(
        [
            "evaluate",
            "--model",
            f"predictions:{tmp_path / 'few.csv'}",
            "--task",
            "bin-cat-dog",
            "--artifact",
            str(matched),
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and "has no prediction for" in err and "fix:" in err
    assert not (tmp_path / "x").exists()
    rc = main(
        [
            "evaluate",
            "--model",
            "efficientnet-lite0",
            "--task",
            "bin-cat-dog",
            "--artifact",
            str(matched),
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert rc == 2 and "--images" in capsys.readouterr().err
    rc = main(["evaluate", "--model", "torchvision:resnet18", "--task", "bin-cat-dog", "--out", str(tmp_path / "x")])
    assert rc == 2 and "torchvision" in capsys.readouterr().err
    rc = main(
        [
            "evaluate",
            "--model",
            f"predictions:{tmp_path / 'few.csv'}",
            "--task",
            "bin-cat-dog",
            "--artifact",
            str(matched),
            "--hierarchy",
            "nope",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert rc == 2 and "unknown hierarchy" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # numbers are refused while parsing (core.options)
        main(
            [
                "evaluate",
                "--model",
                "efficientnet-lite0",
                "--task",
                "bin-cat-dog",
                "--batch-size",
                "0",
                "--out",
                str(tmp_path / "x"),
            ]
        )
    assert exc.value.code == 2 and "argument --batch-size" in capsys.readouterr().err


def test_cli_sample_and_set(matched, tmp_path, capsys):
    """--sample N scores at most N images per split (seeded, recorded); --set reaches the task's planner."""
    from metashift_hf.hub import api

    table = api.plan(TaskRef("bin-cat-dog", artifact=matched, options={"train_max_per_class": 10})).table()
    _predictions(tmp_path / "p.csv", sorted(set(api.plan(TaskRef("bin-cat-dog", artifact=matched)).table().image_id)))
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        rc = main(
            [
                "evaluate",
                "--model",
                f"predictions:{tmp_path / 'p.csv'}",
                "--task",
                "bin-cat-dog",
                "--artifact",
                str(matched),
                "--out",
                str(out),
                "--no-progress",
                "--sample",
                "4",
                "--set",
                "train_max_per_class=10",
            ]
        )
        assert rc == 0, capsys.readouterr().err
        runs.append(json.loads((out / "report.json").read_text()))
    rep = runs[0]
    assert rep["run"]["sample_per_split"] == 4 and rep["run"]["task_options"] == {"train_max_per_class": 10}
    assert all(s["n"] <= 4 for s in rep["splits"].values()) and rep["overall"]["n"] <= 4 * len(rep["splits"])
    assert runs[0]["overall"] == runs[1]["overall"]  # same seed, same sample
    assert len(table[table.split == "train"]) <= 20  # the option is the planner's: at most 10 per class
    with pytest.raises(SystemExit) as exc:  # refused while parsing (core.options)
        main(
            [
                "evaluate",
                "--model",
                f"predictions:{tmp_path / 'p.csv'}",
                "--task",
                "bin-cat-dog",
                "--artifact",
                str(matched),
                "--out",
                str(tmp_path / "z"),
                "--sample",
                "0",
            ]
        )
    assert exc.value.code == 2 and "argument --sample" in capsys.readouterr().err
