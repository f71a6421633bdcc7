"""Figures quoted in the docs come from a run on the demo world: scripts/docs_figures.py re-plans the tasks
(no images, no training) and every marked block must equal what the code makes now."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from metashift_hf.core.errors import MetashiftError


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def docs_figures():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts" / "docs_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_figures_are_current(demo_build, docs_figures):
    _, art = demo_build
    problems = docs_figures.stale(art, names=tuple(n for n in docs_figures.BLOCKS if n != "matched-tasks-demo"))
    assert not problems, "\n".join(problems) + "\nrun: python scripts/docs_figures.py --write"


def test_matched_task_figures_are_current(demo_build, docs_figures, wordnet_cache):
    _, art = demo_build
    try:
        problems = docs_figures.stale(art, names=("matched-tasks-demo",), wordnet_cache=wordnet_cache)
    except MetashiftError as exc:  # e.g. WordNet dict files not installed on this machine
        pytest.skip(f"wordnet_match unavailable: {exc.what}")
    assert not problems, "\n".join(problems) + "\nrun: python scripts/docs_figures.py --write"


def test_a_stale_figure_fails_the_check(demo_build, docs_figures, tmp_path):
    _, art = demo_build
    doc = tmp_path / "docs" / "tasks.md"
    doc.parent.mkdir()
    text = (ROOT / "docs" / "tasks.md").read_text()
    assert "| 0.647 |" in text  # paper-dg-cat-dog-1's distance on the demo
    doc.write_text(text.replace("| 0.647 |", "| 0.157 |", 1))
    problems = docs_figures.stale(art, tmp_path, names=("paper-tasks-demo",))
    assert len(problems) == 1 and "paper-tasks-demo" in problems[0] and "0.157" in problems[0]
    # a stored experiment run whose sizes the code no longer plans is stale too
    run = json.loads((docs_figures.FIGURES / "paper-dg-demo.json").read_text())
    run["rows"][0]["n_train"] += 1
    assert any("n_train" in p for p in docs_figures._stale_run(art, run))


def test_stored_experiment_runs_are_checked(demo_build, docs_figures, tmp_path, monkeypatch):
    """docs/experiments.md's tables come from the stored ood-levels, clustered, conflicts and bug-report runs: a
    stored run whose tasks the code plans differently, or whose features came from another crop rule, is stale,
    and a table that no longer matches its stored run is too."""
    _, art = demo_build
    levels = json.loads((docs_figures.FIGURES / "ood-levels-conditional-demo.json").read_text())
    assert docs_figures._stale_run(art, levels) == [] and docs_figures._stale_features(levels) is None
    levels["levels"][0]["n_test"] += 1  # one line per task, though every model trained on it
    assert docs_figures._stale_run(art, levels) == [
        f"{levels['levels'][0]['task_id']}: n_test 89 in the stored run, 88 now"
    ]
    bugs = json.loads((docs_figures.FIGURES / "bugs-demo.json").read_text())
    assert docs_figures._stale_run(art, bugs) == []
    bugs["sizes"]["n_train"] -= 1
    assert any("n_train" in p for p in docs_figures._stale_run(art, bugs))
    for name in ("ood-levels-marginal", "clustered", "conflicts"):
        run = json.loads((docs_figures.FIGURES / f"{name}-demo.json").read_text())
        run["backbone"]["preprocessing"]["crop_rule"] = "crop-then-resize"
        assert "crop-then-resize" in docs_figures._stale_features(run)
    # a stored result that moved: its table in docs/experiments.md is stale
    figures = tmp_path / "figures"
    shutil.copytree(docs_figures.FIGURES, figures)
    monkeypatch.setattr(docs_figures, "FIGURES", figures)
    clustered = json.loads((figures / "clustered-demo.json").read_text())
    clustered["per_k"][0]["id"] = 0.5
    (figures / "clustered-demo.json").write_text(json.dumps(clustered))
    problems = docs_figures.stale(art, names=("clustered-demo", "conflicts-demo"))
    assert len(problems) == 1 and "clustered-demo" in problems[0] and "50.0%" in problems[0]
