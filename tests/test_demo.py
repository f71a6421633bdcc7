"""`metashift-hf demo` end to end on the embedded world: every stage leaves its real output."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import datasets
import pandas as pd
import pytest

from metashift_hf import cli


@pytest.mark.slow
def test_demo_runs_every_stage(tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().err  # the stages log what they made; the CLI shows it on stderr

    stats = json.loads((out / "artifact" / "stats.json").read_text())
    assert stats["classes"] >= 10 and stats["subsets"] >= 100
    assert (out / "artifact" / "plots" / "dog.png").stat().st_size > 0
    match = json.loads((out / "artifact" / "match" / "match.json").read_text())
    assert match["classes"] >= 5

    # DG, subpopulation and matched repos, each loadable with plain datasets from the folder
    for task in ("paper-dg-cat-dog-1", "paper-subpop-cat-dog-p12", "imagenet-5"):
        repo = out / "hub" / f"metashift-{task}"
        assert f"datasets.load_dataset({str(repo)!r}, {task!r})" in printed
        ds = datasets.load_dataset(str(repo), task)
        assert set(ds) >= {"train", "validation", "test"}
        assert ds["train"][0]["image"].format == "JPEG"
    assert "metashift" in {p.name for p in (out / "hub").iterdir()}

    if all(importlib.util.find_spec(m) for m in ("torch", "efficientnet_lite_pytorch")):
        from metashift_hf.demo import EVAL_SAMPLE_PER_SPLIT

        report = json.loads((out / "eval" / "report.json").read_text())
        splits = datasets.load_dataset(str(out / "hub" / "metashift-imagenet-5"), "imagenet-5")
        expected = sum(min(EVAL_SAMPLE_PER_SPLIT, len(s)) for s in splits.values())
        assert report["overall"]["n"] == expected
        assert report["run"]["model"]["name"] == "efficientnet-lite0"
        assert report["run"]["mode"] == "restricted"
        # the same logits scored hierarchy-aware, kept beside the headline
        hier = json.loads((out / "eval-hierarchy" / "report.json").read_text())
        assert hier["run"]["mode"] == "hierarchy" and hier["overall"]["n"] == expected
        # linear-probe ERM on the subpopulation task: average vs worst group, as scored from its predictions
        scores = json.loads((out / "train" / "seed-0" / "scores.json").read_text())
        assert (
            scores["task_id"] == "paper-subpop-cat-dog-p12" and scores["worst_group"]["accuracy"] <= scores["average"]
        )
        # the headline rule: the test split's balanced accuracy, chance beside it, recomputed from the files
        assert (
            f"ERM on paper-subpop-cat-dog-p12 (test, n={scores['splits']['test']['n']}): balanced accuracy "
            f"{100 * scores['splits']['test']['balanced_accuracy']:.1f}% vs chance "
            f"{100 * scores['splits']['test']['chance']['balanced_accuracy']:.1f}%"
        ) in printed
        per_image = pd.read_csv(out / "eval" / "predictions.csv", dtype={"label": str})
        test = per_image[per_image["split"] == "test"]
        balanced = test.groupby("label")["correct"].mean().mean()  # mean per-class accuracy, by hand
        chance = 1 / test["label"].nunique()  # always the majority class: one class right, the others 0
        assert report["headline"]["split"] == "test" and report["headline"]["n"] == len(test)
        assert f"(restricted; test, n={len(test)}): balanced accuracy {100 * balanced:.1f}% vs chance " in printed
        assert f"vs chance {100 * chance:.1f}%; worst group" in printed
        assert "drawn shapes, not ImageNet photographs" in printed
        assert f"(restricted): {100 * report['overall']['accuracy']:.1f}%" not in printed  # no pooled headline
        # the headline README quotes is the one the demo prints (the demo is deterministic)
        readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
        quoted = readme.split("Headline:\n", 1)[1].split("```", 1)[0].strip().splitlines()
        shown = printed.split("Headline:\n", 1)[1].strip().splitlines()[: len(quoted)]
        assert [line.strip() for line in quoted] == [line.strip() for line in shown]
    assert "Done in" in printed
