"""Issue 34 part 1: every task request becomes rows in one place.

A task id is planned only by the resolver (``metashift_hf.hub.task_open``, through ``tasks.families.plan_task``)
and materialised only by ``TaskData.prepare`` (``metashift_hf.hub.task_data``, through the ``metashift``
ArrowBasedBuilder). Any other module that imports the builder or the planner builds rows on its own: a second
route, where a second set of numbers can appear. The task-planning package itself (the planner and its
families, ``metashift_hf/tasks/``) is below both and may plan.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("metashift_hf", "builders", "wordnet_match", "cards")
# name -> the modules (paths from the repo root) that may import it
ALLOWED = {
    "Metashift": {"metashift_hf/tasks/metashift.py", "metashift_hf/hub/task_data.py"},
    "MetashiftConfig": {"metashift_hf/tasks/metashift.py"},
    "plan_task": {"metashift_hf/hub/task_open.py"},
}
PLANNER_PACKAGE = "metashift_hf/tasks/"  # the planner and the task families: plan_task lives here


def row_builders(source: str) -> set[str]:
    """The names of :data:`ALLOWED` that ``source`` imports or reaches as an attribute (``tasks.plan_task``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names if a.name in ALLOWED}
        elif isinstance(node, ast.Attribute) and node.attr in ALLOWED:
            found.add(node.attr)
    return found


def test_the_scanner_sees_a_second_route():
    """The check below can fail: a module that imports the builder or the planner is seen, however spelled."""
    assert row_builders("from metashift_hf.tasks.metashift import Metashift") == {"Metashift"}
    assert row_builders("from ..tasks.families import plan_task as p") == {"plan_task"}
    assert row_builders("from metashift_hf.tasks import families\nfamilies.plan_task('t', a)") == {"plan_task"}
    assert row_builders("from metashift_hf.hub.api import prepare") == set()


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_only_the_resolver_plans_and_only_the_materialiser_builds_rows(name):
    offenders = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED[name] or (name == "plan_task" and rel.startswith(PLANNER_PACKAGE)):
                continue
            if name in row_builders(path.read_text(encoding="utf-8")):
                offenders.append(rel)
    assert not offenders, (
        f"{', '.join(offenders)} use(s) {name}: plan through open_task / TaskOrigin and materialise with "
        "TaskData.prepare (metashift_hf.prepare / load), the one materialiser"
    )


# Issue 42 part 1: a task's rows and pixels are read in metashift_hf/hub/ only (TaskData: .plan, .images(),
# .prepare()). These calls read a task's parquet (through datasets, as hub/task_repo.py does) or a dataset's image
# bytes; outside hub/ only the readers themselves (builders/images.py: DatasetImages, cell_bytes) and a build's own
# input (builders/tags.py: the user's multi-label dataset, not a task) may make them. (pandas/pyarrow parquet reads
# elsewhere are an artifact's tables or a user's predictions file, never a task's shards.)
TASK_READS = {"cast_column", "cell_bytes", "DatasetImages", "load_dataset"}
READERS_ALLOWED = {"builders/images.py", "builders/tags.py"}
HUB = "metashift_hf/hub/"


def task_reads(source: str) -> set[str]:
    """The calls of ``source`` that read a dataset's rows or image bytes themselves: a call of one of
    :data:`TASK_READS` (however imported or spelled), or any call with ``decode=False`` (an undecoded image column)."""
    tree = ast.parse(source)
    alias = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names if a.asname}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        name = alias.get(name, name)
        if name in TASK_READS:
            found.add(name)
        if any(
            k.arg == "decode" and isinstance(k.value, ast.Constant) and k.value.value is False for k in node.keywords
        ):
            found.add("decode=False")
    return found


def test_the_scanner_sees_a_private_task_reader():
    """The check below can fail: evaluate's old reader (issue 42) and the card pictures' old one are seen."""
    old_evaluate = (
        "raw = {s: dd[s].cast_column('image', datasets.Image(decode=False)) for s in dd}\n"
        "def read(iid):\n    return cell_bytes(raw[s][row]['image'], where, iid)\n"
    )
    assert task_reads(old_evaluate) == {"cast_column", "decode=False", "cell_bytes"}
    assert task_reads("ds = datasets.load_dataset(repo, config)") == {"load_dataset"}
    assert task_reads("src = DatasetImages(ds, 'image', ids, name)") == {"DatasetImages"}
    assert task_reads("from datasets import load_dataset as ld\nld(str(folder), name)") == {"load_dataset"}
    assert task_reads("import datasets\nrows = datasets.load_dataset(str(folder), name)") == {"load_dataset"}
    assert task_reads("src = open_task(task).images(); data = src.read(iid)") == set()
    assert task_reads("isinstance(x, DatasetImages)") == set()  # naming the type reads nothing


def test_only_the_hub_reads_a_tasks_rows_and_pixels():
    offenders = {}
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(HUB) or rel in READERS_ALLOWED:
                continue
            found = task_reads(path.read_text(encoding="utf-8"))
            if found:
                offenders[rel] = sorted(found)
    assert not offenders, (
        f"{offenders} read a task's parquet or image bytes themselves: read a task through "
        "metashift_hf.hub (open_task(...) -> TaskData .plan / .images() / .prepare())"
    )
