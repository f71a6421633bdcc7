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
