"""Shift families by type and level on a world whose answers are known by construction."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from metashift_hf.core.errors import EmptyResultError, MetashiftError, UnknownNameError
from metashift_hf.core.options import OptionError
from metashift_hf.tasks import level_plans, levels
from metashift_hf.tasks.plan import Row, SetSource, TaskPlan
from metashift_hf.tasks.spec import Factor, Level, ShiftSpec


CONTEXTS = [f"c{i:02d}" for i in range(20)]
POS = {c: i for i, c in enumerate(CONTEXTS)}


def world(seed: int = 0, per: int = 60, two: float = 0.2) -> SetSource:
    """cat/dog images in one context each (a fraction ``two`` also in the next context), plus
    'indoor'/'outdoor' contexts for the conditional factor (cats mostly indoor)."""
    rng = np.random.default_rng(seed)
    subsets: dict[str, set[str]] = {}
    n = 0
    for cls in ("cat", "dog"):
        for c in CONTEXTS:
            for _ in range(per + int(rng.integers(0, per // 3 + 1))):
                iid = f"{cls}{n}"
                n += 1
                subsets.setdefault(f"{cls}({c})", set()).add(iid)
                if rng.random() < two:
                    nxt = CONTEXTS[(POS[c] + 1) % len(CONTEXTS)]
                    subsets.setdefault(f"{cls}({nxt})", set()).add(iid)
                side = "indoor" if POS[c] % 2 == 0 else "outdoor"
                subsets.setdefault(f"{cls}({side})", set()).add(iid)
    return SetSource(subsets)


def line_distance(cls: str, a, b) -> float:
    """Contexts on a line: distance between the mean positions of two context sets."""
    return abs(float(np.mean([POS[x] for x in a])) - float(np.mean([POS[x] for x in b])))


PAPER_LIKE = {
    "cat(indoor)": ["indoor"],
    "dog(indoor)": ["indoor"],
    "cat(outdoor)": ["outdoor"],
    "dog(outdoor)": ["outdoor"],
}


@pytest.fixture(scope="module")
def src() -> SetSource:
    return world()


def plan(src, tid, **kw):
    return level_plans.plan(
        tid,
        src,
        line_distance,
        ["cat", "dog"],
        paper_groups=PAPER_LIKE,
        candidates=kw.pop("candidates", CONTEXTS),
        **kw,
    )


def split_ids(p: TaskPlan, split: str) -> set[str]:
    return {r.image_id for r in p.splits.get(split, [])}


def test_ids_round_trip_and_bad_ids():
    ids = level_plans.family_ids(["cat", "dog"])
    assert "shift-marginal-cat-dog-d3" in ids and "shift-conditional-cat-dog-delta49-rev" in ids
    assert "shift-joint-cat-dog-d2-delta45" in ids and "shift-marginal-cat-dog-d3-mix25" in ids
    for tid in ids:
        t, classes, name = levels.parse_task_id(tid, ["cat", "dog", "fire-hydrant"])
        assert levels.task_id(t, classes, name) == tid
        levels.parse_level(t, name)
    assert levels.parse_task_id("shift-marginal-fire-hydrant-dog-d1", ["dog", "fire-hydrant"])[1] == (
        "fire-hydrant",
        "dog",
    )
    for bad in (
        "shift-lateral-cat-dog-d1",
        "shift-marginal-cat-d1",
        "shift-marginal-cat-dog-d9",
        "shift-conditional-cat-dog-delta33",
        "shift-conditional-cat-dog-delta00-rev",
        "shift-marginal-cat-dog-d1-mix33",
    ):
        with pytest.raises(UnknownNameError):
            t, c, name = levels.parse_task_id(bad, ["cat", "dog"])
            levels.parse_level(t, name)


def test_marginal_levels(src):
    lv = [plan(src, f"shift-marginal-cat-dog-d{k}") for k in range(4)]
    design = level_plans.marginal_design(src, ["cat", "dog"], line_distance, candidates=CONTEXTS)
    # C_te is the largest shared context plus none (test_contexts=1); levels are nearest .. farthest
    assert list(design.distances) == sorted(design.distances) and design.distances[0] < design.distances[-1]
    tests = [split_ids(p, "test") for p in lv]
    assert all(t == tests[0] for t in tests)  # one OOD test set for the family
    n_train = {len(p.splits["train"]) for p in lv}
    assert len(n_train) == 1  # the same training size at every level
    for k, p in enumerate(lv):
        spec = p.spec
        assert spec.shift_type == "marginal" and spec.level.type == "marginal"
        assert spec.level.name == f"d{k}" and spec.level.distance == pytest.approx(design.distances[k])
        tr_ctx = set(spec.factor.values["train"])
        te_ctx = set(spec.factor.values["test"])
        assert not tr_ctx & te_ctx
        for split in ("train", "validation", "id_test", "test"):
            rows = p.splits[split]
            want = te_ctx if split == "test" else tr_ctx
            assert {r.context for r in rows} <= want
            by = Counter((r.context, r.label) for r in rows)  # class-balanced within each context
            for ctx in {r.context for r in rows}:
                assert by[(ctx, "cat")] == by[(ctx, "dog")]
            for r in rows:  # independent of the generator: one value of the factor per image
                assert len([v for v in (tr_ctx, te_ctx) if set(r.contexts) & v]) == 1
        levels.check_level_plan(p)


def test_marginal_mix_is_the_control(src):
    base = plan(src, "shift-marginal-cat-dog-d3")
    test = split_ids(base, "test")
    for pct in (10, 25, 50):
        p = plan(src, f"shift-marginal-cat-dog-d3-mix{pct}")
        te_ctx = set(p.spec.factor.values["test"])
        mixed = [r for r in p.splits["train"] if r.context in te_ctx]
        assert len(p.splits["train"]) == len(base.splits["train"])  # fixed size
        n_tr = len(base.splits["train"]) // 2
        assert len(mixed) == 2 * int(round(pct / 100 * n_tr))
        assert split_ids(p, "test") == test  # tests on the rest of C_te, same set at every fraction
        assert not {r.image_id for r in mixed} & test
        assert p.spec.level.mixed_fraction == pct / 100


@pytest.mark.parametrize("delta", levels.DELTAS)
def test_conditional_levels(src, delta):
    name = levels._delta_name(delta)
    for test_mode, tid in (
        ("balanced", f"shift-conditional-cat-dog-{name}"),
        ("reversed", f"shift-conditional-cat-dog-{name}-rev"),
    ):
        if test_mode == "reversed" and delta == 0:
            continue
        p = plan(src, tid)
        assert p.spec.level == Level(
            type="conditional",
            name=tid.split("cat-dog-")[1],
            rank=None,
            delta=delta,
            mixed_fraction=0.0,
            test=test_mode,
            distance=None,
        )
        levels.check_level_plan(p)
        for split in ("train", "test", "validation", "id_test"):
            rows = p.splits[split]
            assert all(r.group == f"{r.label}({r.context})" for r in rows)  # context: the s1/s2 value's label
            cnt = Counter((r.label, r.context) for r in rows)
            n_s1 = cnt[("cat", "indoor")] + cnt[("dog", "indoor")]
            assert n_s1 * 2 == len(rows)  # P(s1) = 1/2 in every split
            p_a_s1 = cnt[("cat", "indoor")] / n_s1
            want = 0.5 + delta if split != "test" else (0.5 if test_mode == "balanced" else 0.5 - delta)
            assert p_a_s1 == pytest.approx(want, abs=1.0 / n_s1 + 1e-9)
        assert p.spec.minority_fraction.target == pytest.approx(0.5 - delta)


def test_conditional_training_sets_are_nested_and_sized_alike(src):
    a = plan(src, "shift-conditional-cat-dog-delta10")
    b = plan(src, "shift-conditional-cat-dog-delta49")
    assert len(a.splits["train"]) == len(b.splits["train"])
    assert split_ids(a, "test") == split_ids(plan(src, "shift-conditional-cat-dog-delta49"), "test")


def test_joint_grid(src):
    m = plan(src, "shift-marginal-cat-dog-d2")
    sizes = set()
    for delta in (0.0, 0.3, 0.49):
        p = plan(src, f"shift-joint-cat-dog-d2-{levels._delta_name(delta)}")
        levels.check_level_plan(p)
        assert p.spec.level.rank == 2 and p.spec.level.delta == delta
        assert split_ids(p, "test") == split_ids(m, "test")  # marginal family's OOD test
        inner = {k: set(v) for k, v in p.spec.factor.within_train.items()}
        assert inner["s1"] | inner["s2"] == set(p.spec.factor.values["train"])
        rows = p.splits["train"]
        s_of = {x: s for s, xs in inner.items() for x in xs}
        cnt = Counter((r.label, s_of[r.context]) for r in rows)
        n_s1 = cnt[("cat", "s1")] + cnt[("dog", "s1")]
        assert 2 * n_s1 == len(rows)
        assert cnt[("cat", "s1")] / n_s1 == pytest.approx(0.5 + delta, abs=1.0 / n_s1 + 1e-9)
        sizes.add(len(rows))
    assert len(sizes) == 1


def test_images_with_two_values_are_dropped(src):
    p = plan(src, "shift-marginal-cat-dog-d1")
    assert p.spec.factor.dropped_two_values > 0  # the world puts 20% of images in two contexts


def test_deterministic_and_seeded(src):
    a = plan(src, "shift-marginal-cat-dog-d1", seed=3)
    b = plan(src, "shift-marginal-cat-dog-d1", seed=3)
    c = plan(src, "shift-marginal-cat-dog-d1", seed=4)
    assert a.splits == b.splits and a.splits != c.splits


def test_check_refuses_bad_plans():
    spec = ShiftSpec(
        "t",
        "marginal",
        ("cat", "dog"),
        0,
        {},
        factor=Factor(name="x", values={"train": ("a",), "test": ("b",)}, dropped_two_values=0, rule=""),
    )
    ok = {
        "train": [Row("1", "cat", "cat(a)", "a", ("a",), 0), Row("2", "dog", "dog(a)", "a", ("a",), 0)],
        "test": [Row("3", "cat", "cat(b)", "b", ("b",), 0), Row("4", "dog", "dog(b)", "b", ("b",), 0)],
    }
    levels.check_level_plan(TaskPlan("t", ["cat", "dog"], ok, spec))
    two = dict(ok, test=[Row("3", "cat", "cat(b)", "b", ("a", "b"), 0), ok["test"][1]])
    with pytest.raises(MetashiftError, match="factor values"):
        levels.check_level_plan(TaskPlan("t", ["cat", "dog"], two, spec))
    prior = dict(ok, test=[ok["test"][0], Row("5", "cat", "cat(b)", "b", ("b",), 0)])
    with pytest.raises(MetashiftError, match="P\\(Y\\)"):
        levels.check_level_plan(TaskPlan("t", ["cat", "dog"], prior, spec))
    leak = dict(ok, test=[Row("1", "cat", "cat(b)", "b", ("b",), 0), ok["test"][1]])
    with pytest.raises(MetashiftError):
        levels.check_level_plan(TaskPlan("t", ["cat", "dog"], leak, spec))


def test_too_small_world_says_so():
    tiny = world(per=3)
    with pytest.raises(EmptyResultError):
        plan(tiny, "shift-marginal-cat-dog-d0", sizes=levels.LevelSizes(min_images=1))
    with pytest.raises(OptionError, match="levels"):
        levels.LevelSizes(levels=1)


def test_allocate():
    assert level_plans.allocate([5, 5, 10], 10) == [3, 2, 5]
    assert sum(level_plans.allocate([3, 7, 1], 11)) == 11
    with pytest.raises(EmptyResultError):
        level_plans.allocate([1, 1], 3)
