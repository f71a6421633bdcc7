"""The task-family registry (tasks.families): dispatch, typed options, adding a family."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.core.registry import Registry
from metashift_hf.tasks import families as tasks
from metashift_hf.tasks import plan, shifts


def test_every_id_has_exactly_one_family(builder_world):
    art = builder_world["artifact"]
    ids = tasks.task_ids(art)
    assert {"paper-dg-cat-dog-1", "paper-subpop-cat-dog-p12", "class-cat", "classes"} <= set(ids)
    for task_id in ids:
        owners = [f.name for f in tasks.families() if f.owns(art, task_id)]
        assert len(owners) == 1, (task_id, owners)
    assert tasks.family_of(art, "class-dog").info(art, "class-dog") == tasks.TaskInfo(
        "class-dog", "class", "class", ("dog",)
    )
    assert {"paper", "class", "collection", "binary", "multiclass"} <= set(tasks.kinds())


def test_options_are_typed_and_checked(builder_world):
    art = builder_world["artifact"]
    fam = tasks.family_of(art, "paper-dg-cat-dog-1")
    opts = tasks.parse_options(
        fam, "paper-dg-cat-dog-1", {"scale": 1, "train_per_group": 20.0, "additional_test_per_group": None}
    )
    assert opts == tasks.PaperDGOptions(scale=1.0, train_per_group=20, additional_test_per_group=None)
    assert isinstance(opts.scale, float) and isinstance(opts.train_per_group, int)
    assert tasks.given_options(opts) == {"scale": 1.0, "train_per_group": 20, "additional_test_per_group": None}
    with pytest.raises(InputFormatError, match="train_per_group") as exc:
        tasks.plan_task("paper-dg-cat-dog-1", art, train_per_group="many")
    assert "integer" in exc.value.what and "--set train_per_group" in exc.value.fix
    with pytest.raises(InputFormatError, match="selected_classes"):
        tasks.plan_task("classes", art, selected_classes="cat")  # a bare string is not a list of names
    with pytest.raises(InputFormatError, match="paper"):
        tasks.plan_task("class-cat", art, scale=0.5)  # a paper option on a collection names the family
    with pytest.raises(UnknownNameError, match="min_local_groups"):
        tasks.plan_task("class-cat", art, min_local_group=2)
    assert tasks.option_docs(tasks.ClassOptions)["min_local_groups"]


def test_spec_records_given_options(builder_world):
    plan = tasks.plan_task("paper-subpop-cat-dog-p1", builder_world["artifact"], scale=0.1)
    assert plan.spec.overrides == {"scale": 0.1}
    plan = tasks.plan_task("classes", builder_world["artifact"], selected_classes=["cat"])
    assert plan.spec.overrides == {"selected_classes": ["cat"]} and plan.classes == ["cat"]


@dataclass(frozen=True)
class _OneClassOptions:
    cap: int | None = field(default=None, metadata={"doc": "at most this many images"})


class _OneClass(tasks.TaskFamily):
    """A family added the documented way: a subclass and one TASK_FAMILIES.register() call."""

    name, title, kind, options_type = "one", "one-class tasks (one-<class>)", "one", _OneClassOptions

    def owns(self, artifact, task_id):
        return task_id.startswith("one-")

    def ids(self, artifact):
        return [f"one-{c}" for c in artifact.classes()]

    def classes(self, artifact, task_id):
        return (task_id[len("one-") :],)

    def plan(self, artifact, task_id, options, seed):
        (cls,) = self.classes(artifact, task_id)
        source = plan.ArtifactSource(artifact)
        ctx = source.kept_contexts(cls)
        keep = sorted(ctx)[: options.cap] if options.cap is not None else sorted(ctx)
        return shifts.collection(task_id, source, contexts={cls: {c: ctx[c] for c in keep}}, seed=seed)


def test_adding_a_family_is_one_registration(builder_world, monkeypatch):
    copy = Registry("task family")
    for family in tasks.families():
        copy.register(family)
    monkeypatch.setattr(tasks, "TASK_FAMILIES", copy)
    tasks.TASK_FAMILIES.register(_OneClass())
    art = builder_world["artifact"]
    assert "one-cat" in tasks.task_ids(art)
    plan = tasks.plan_task("one-cat", art, cap=2)
    assert plan.classes == ["cat"] and plan.spec.overrides == {"cap": 2}
    with pytest.raises(InputFormatError, match="cap"):
        tasks.plan_task("one-cat", art, cap="two")
    with pytest.raises(MetashiftError, match="twice"):
        tasks.TASK_FAMILIES.register(_OneClass())


def test_every_family_spec_round_trips_through_json(builder_world):
    from metashift_hf.tasks.spec import ShiftSpec

    art = builder_world["artifact"]
    ids = tasks.task_ids(art)
    picked = ["paper-dg-cat-dog-1", "paper-subpop-cat-dog-p1", "class-cat", "classes"]
    picked += [
        next(i for i in ids if i.startswith(f"shift-{t}-"))
        for t in ("marginal", "conditional", "joint")
        if any(i.startswith(f"shift-{t}-") for i in ids)
    ]
    for task_id in picked:
        options = {"scale": 0.1} if task_id.startswith("paper-") else {}
        try:
            spec = tasks.plan_task(task_id, art, **options).spec
        except MetashiftError as exc:  # a shift level this small world cannot supply: say which
            pytest.fail(f"{task_id}: {exc}")
        assert ShiftSpec.from_json(spec.to_json()) == spec, task_id
