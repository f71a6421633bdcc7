"""Figures quoted in the docs come from a run on the demo world: scripts/docs_figures.py re-plans the tasks
(no images, no training) and every marked block must equal what the code makes now."""

from __future__ import annotations

import importlib.util
import json
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
