"""Shift families in the task registry: listed, planned through the registry with typed options,
prepared (exportable) like any task; paper tasks carry a level in the same vocabulary."""

from __future__ import annotations

import pytest

from metashift_hf.cli import main
from metashift_hf.core.errors import MetashiftError
from metashift_hf.hub import api
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.tasks import level_plans, levels
from metashift_hf.tasks.families import family_of, task_ids


def test_listed_and_planned(builder_world):
    art = builder_world["artifact"]
    ids = [i for i in task_ids(art) if i.startswith("shift-")]
    assert ids == level_plans.family_ids(["cat", "dog"])
    for tid in (
        "shift-marginal-cat-dog-d0",
        "shift-marginal-cat-dog-d3-mix25",
        "shift-conditional-cat-dog-delta49-rev",
        "shift-joint-cat-dog-d1-delta20",
    ):
        assert family_of(art, tid).kind == "shift"
        p = api.plan(TaskRef(tid, artifact=art.root, seed=1))
        levels.check_level_plan(p)
        assert p.spec.level.type == tid.split("-")[1] and p.spec.level.name == tid.split("cat-dog-")[1]
        assert p.spec.shift_type == tid.split("-")[1]
        assert p.spec.artifact_hash == art.content_hash
    p = api.plan(TaskRef("shift-marginal-cat-dog-d2", artifact=art.root, options={"train_per_class": 8}))
    assert p.spec.overrides == {"train_per_class": 8}
    assert sum(r.label == "cat" for r in p.splits["train"]) == 8
    with pytest.raises(MetashiftError, match="train_per_clas"):
        api.plan(TaskRef("shift-marginal-cat-dog-d2", artifact=art.root, options={"train_per_clas": 8}))


def test_tasks_list_kind_shift(builder_world, capsys):
    assert main(["tasks", "list", "--artifact", str(builder_world["artifact"].root), "--kind", "shift"]) == 0
    out = capsys.readouterr().out
    assert "shift-marginal-cat-dog-d3 " in out and "paper-" not in out


def test_prepared_like_any_task(builder_world, tmp_path):
    tid = "shift-conditional-cat-dog-delta30"
    task = api.prepare(
        TaskRef(tid, artifact=builder_world["artifact"].root, images=builder_world["folder"]), cache_dir=tmp_path
    )
    p = api.plan(TaskRef(tid, artifact=builder_world["artifact"].root))
    for split, rows in p.splits.items():
        assert sorted(task.dataset[split]["image_id"]) == sorted(r.image_id for r in rows)
    assert task.spec.level.delta == 0.3


def test_paper_tasks_have_levels(builder_world):
    dg = api.plan(TaskRef("paper-dg-cat-dog-1", artifact=builder_world["artifact"].root, options={"scale": 0.1}))
    assert dg.spec.level.type == "joint" and dg.spec.level.distance == dg.spec.distance.value
    sp = api.plan(TaskRef("paper-subpop-cat-dog-p12", artifact=builder_world["artifact"].root, options={"scale": 0.1}))
    p = sp.spec.minority_fraction.achieved
    assert sp.spec.level.type == "conditional" and sp.spec.level.delta == pytest.approx(0.5 - p)
