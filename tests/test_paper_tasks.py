"""The paper's cat/dog tasks: facts equal the shared reference, paper sizes, leakage order."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fixtures.worlds import paper_world
from metashift_hf.core.errors import EmptyResultError, UnknownNameError
from metashift_hf.core.options import OptionError
from metashift_hf.tasks import paper_tasks as pt
from metashift_hf.tasks.plan import SetSource


@pytest.fixture(scope="module")
def world():
    return SetSource(paper_world())


def test_facts_equal_shared_reference(shared_ref):
    ref = json.loads((shared_ref / "metashift" / "paper-tasks.json").read_text())
    dg = ref["domain_generalization_cat_dog"]
    tup = lambda d: {k: tuple(v) for k, v in d.items()}  # noqa: E731
    assert tup(dg["train"]["cat"]) == pt.DG_TRAIN_CAT
    assert [tup(e["groups"]) for e in dg["train"]["dog_experiments"]] == list(pt.DG_DOG_EXPERIMENTS)
    assert [e["paper_distance_to_test"] for e in dg["train"]["dog_experiments"]] == list(pt.DG_PAPER_DISTANCES)
    assert {**tup(dg["test"]["cat"]), **tup(dg["test"]["dog"])} == pt.DG_TEST
    assert {**tup(dg["additional_test"]["cat"]), **tup(dg["additional_test"]["dog"])} == pt.DG_ADDITIONAL_TEST
    assert dg["paper_sizes"] == pt.DG_PAPER_SIZES
    assert tuple(ref["leakage_order"]) == pt.LEAKAGE_ORDER
    sp = ref["subpopulation_shift_cat_dog_indoor_outdoor"]
    assert tup(sp["groups"]) == pt.SUBPOP_GROUPS
    assert tuple(sp["minority_groups"]) == pt.SUBPOP_MINORITY
    assert tuple(sp["paper"]["minority_fraction_p"]) == pt.SUBPOP_PAPER_FRACTIONS
    assert {
        "average": tuple(sp["paper"]["erm_average_accuracy"]),
        "worst_group": tuple(sp["paper"]["erm_worst_group_accuracy"]),
    } == pt.SUBPOP_PAPER_ERM
    assert {
        "train_total": sp["paper"]["train_total"],
        "test_total": sp["paper"]["balanced_test_total"],
    } == pt.SUBPOP_PAPER_SIZES
    assert sp["sampling"]["truncate_after_seeded_shuffle"] == pt.SUBPOP_POOL
    assert sp["sampling"]["test_per_group"] == pt.SubpopSizes().test_per_group
    assert sp["sampling"]["train_per_class"] == pt.SubpopSizes().train_per_class
    assert sp["sampling"]["default_minority_images"] == pt.SubpopSizes().minority_per_class
    assert sorted(pt.SUBPOP_VARIANTS.values()) == sorted(
        set(sp["sampling"]["minority_images_per_class_options"]) - {150}
    )


@pytest.mark.parametrize(
    "task_id,m", [("paper-subpop-cat-dog-p12", 100), ("paper-subpop-cat-dog-p6", 50), ("paper-subpop-cat-dog-p1", 10)]
)
def test_subpop_paper_sizes(world, task_id, m):
    plan = pt.plan(task_id, world, seed=0)
    sizes = plan.spec.split_sizes
    assert sizes["train"] == 1700 and sizes["test"] == 576
    test = plan.splits["test"]
    for g in pt.SUBPOP_GROUPS:
        assert sum(r.group == g for r in test) == 144
    train = plan.splits["train"]
    for g in pt.SUBPOP_MINORITY:
        assert sum(r.group == g for r in train) == m
    assert plan.spec.minority_fraction.achieved == round(2 * m / 1700, 6)
    ids = [r.image_id for rows in plan.splits.values() for r in rows]
    assert len(ids) == len(set(ids)) and not any(i.startswith("both") for i in ids)


def test_dg_paper_sizes_and_leakage_order(world):
    subsets = paper_world()
    plan = pt.plan("paper-dg-cat-dog-2", world, seed=1, overrides={"additional_test_per_group": None})
    assert plan.spec.split_sizes["train"] == 400  # the paper's train_total
    train_groups = {e.group for e in plan.spec.train_groups}
    assert train_groups == {"cat(sofa)", "cat(bed)", "dog(bag)", "dog(box)"}

    def union(cls, ctxs):
        return set().union(*[subsets.get(f"{cls}({c})", set()) for c in ctxs])

    main_test = union("cat", pt.DG_TEST["cat(shelf)"]) | union("dog", pt.DG_TEST["dog(shelf)"])
    for s in ("train", "validation", "id_test"):
        assert not {r.image_id for r in plan.splits[s]} & main_test
    full_train = set().union(*[union(n[:3], c) for n, c in {**pt.DG_TRAIN_CAT, **pt.DG_DOG_EXPERIMENTS[1]}.items()])
    extra = {r.image_id for r in plan.splits["test"] if r.group in pt.DG_ADDITIONAL_TEST}
    assert extra and not extra & full_train
    d = plan.spec.distance
    assert d.rule == "code" and d.paper_value == 0.71 and np.isfinite(d.value)
    assert plan.spec.removed.ambiguous > 0


def test_dg_distances_differ_across_experiments(world):
    vals = [pt.dg_distance(world, k).value for k in range(1, 5)]
    assert all(np.isfinite(v) for v in vals) and len(set(vals)) == 4


def test_scale_and_overrides():
    small = SetSource(paper_world(n_per_class=700))
    with pytest.raises(EmptyResultError) as exc:
        pt.plan("paper-subpop-cat-dog-p12", small)
    assert "scale" in exc.value.fix
    plan = pt.plan("paper-subpop-cat-dog-p12", small, scale=0.1)
    assert plan.spec.split_sizes["train"] == 170 and plan.spec.split_sizes["test"] == 56
    plan = pt.plan("paper-subpop-cat-dog-p12", small, scale=0.1, overrides={"minority_fraction": 0.2})
    assert sum(r.group == "cat(outdoor)" for r in plan.splits["train"]) == 17
    plan = pt.plan(
        "paper-dg-cat-dog-1",
        small,
        overrides={"train_per_group": 20, "validation_per_group": 5, "id_test_per_group": 5},
    )
    assert plan.spec.split_sizes["train"] == 80
    with pytest.raises(UnknownNameError, match="train_per_group"):
        pt.plan("paper-dg-cat-dog-1", small, overrides={"train_per_grup": 3})
    with pytest.raises(UnknownNameError, match="did you mean"):
        pt.plan("paper-dg-cat-dog-7", small)
    with pytest.raises(OptionError, match="non-negative"):  # a bad value is an option error (issue 42)
        pt.plan("paper-dg-cat-dog-1", small, overrides={"train_per_group": -5})
    with pytest.raises(OptionError, match="minority_fraction"):
        pt.plan("paper-subpop-cat-dog-p12", small, scale=0.1, overrides={"minority_fraction": "a fifth"})


def test_a_bad_size_is_an_option_error_not_a_task_too_big(builder_world):
    """Issue 42: a negative size raised EmptyResultError, which the resolver read as 'the artifact is too small'
    and answered with a --set scale= fix; it is an option error naming the value."""
    from metashift_hf.hub import api
    from metashift_hf.hub.task_data import TaskRef

    ref = TaskRef("paper-dg-cat-dog-1", artifact=builder_world["artifact"], options={"train_per_group": -5})
    with pytest.raises(OptionError, match="train_per_group=-5") as exc:
        api.plan(ref)
    assert not isinstance(exc.value, EmptyResultError) and "scale" not in exc.value.fix
