"""Split plans on plain sets: leakage, sizes per split/group, determinism, errors."""

from __future__ import annotations

import numpy as np
import pytest

from metashift_hf.builders.distances import DISCONNECTED, Distance
from metashift_hf.core.errors import EmptyResultError, MetashiftError
from metashift_hf.core.options import OptionError
from metashift_hf.tasks.plan import GroupDef, Row, SetSource, TaskPlan
from metashift_hf.tasks.shifts import (
    CommunitySizes,
    DGGroups,
    DGSizes,
    DistanceTarget,
    FixedContexts,
    SubpopSizes,
    collection,
    community_shift,
    contexts_near_distance,
    domain_generalisation,
    domain_generalisation_by_distance,
    seeded_order,
    subpopulation_shift,
)
from metashift_hf.tasks.spec import MinorityFraction, ShiftSpec


def make_world(seed: int = 1, n: int = 3000, contexts=("a", "b", "c", "d", "e", "f"), both: int = 40):
    """cat/dog images with 1-3 random contexts each, plus ``both`` images in cat(dog)/dog(cat)."""
    rng = np.random.default_rng(seed)
    subsets: dict[str, set[str]] = {}
    for i in range(n):
        cls = "cat" if i % 2 else "dog"
        for ctx in rng.choice(contexts, size=rng.integers(1, 4), replace=False):
            subsets.setdefault(f"{cls}({ctx})", set()).add(str(i))
    for j in range(both):
        iid = f"x{j}"
        subsets.setdefault("cat(dog)", set()).add(iid)
        subsets.setdefault("dog(cat)", set()).add(iid)
        subsets["cat(a)"].add(iid)
        subsets["dog(a)"].add(iid)
    return subsets


def all_ids(plan: TaskPlan) -> list[str]:
    return [r.image_id for rows in plan.splits.values() for r in rows]


def dg(
    source,
    seed=0,
    sizes=DGSizes(train_per_group=50, validation_per_group=10, id_test_per_group=10, additional_test_per_group=None),
):
    g = lambda c, x: GroupDef(c, x, (x,), x)  # noqa: E731
    return domain_generalisation(
        "t",
        source,
        DGGroups(
            ("cat", "dog"),
            (g("cat", "a"), g("dog", "b")),
            (g("cat", "c"), g("dog", "c")),
            (g("cat", "d"), g("dog", "a")),
        ),
        sizes=sizes,
        seed=seed,
    )


def test_seeded_order_is_deterministic_and_order_free():
    ids = [str(i) for i in range(100)]
    a = seeded_order(ids, 3, "k")
    assert a == seeded_order(list(reversed(ids)), 3, "k")
    assert sorted(a) == sorted(ids) and a != sorted(ids)
    assert a != seeded_order(ids, 4, "k") and a != seeded_order(ids, 3, "other")


def test_dg_no_leakage_and_ambiguous_removed():
    subsets = make_world()
    plan = dg(SetSource(subsets))
    ids = all_ids(plan)
    assert len(ids) == len(set(ids)), "an image is in two rows"
    amb = subsets["cat(dog)"]
    assert not amb & set(ids)
    test_ids = {r.image_id for r in plan.splits["test"]}
    for s in ("train", "validation", "id_test"):
        assert not test_ids & {r.image_id for r in plan.splits[s]}
    # additional test group dog(a) loses every image of the training groups (cat(a), dog(b))
    train_group_imgs = subsets["cat(a)"] | subsets["dog(b)"]
    extra = {r.image_id for r in plan.splits["test"] if r.group == "dog(a)"}
    assert extra and not extra & train_group_imgs
    # main test images never appear in the training groups' rows
    main_test = {r.image_id for r in plan.splits["test"] if r.group in ("cat(c)", "dog(c)")}
    assert main_test == (subsets["cat(c)"] | subsets["dog(c)"]) - amb  # test groups are used whole
    assert plan.spec.removed.ambiguous > 0 and plan.spec.removed.leakage > 0


def test_dg_sizes_match_spec():
    plan = dg(SetSource(make_world()))
    spec = plan.spec
    assert spec.split_sizes == {s: len(r) for s, r in plan.splits.items()}
    assert spec.split_sizes["train"] == 100 and spec.split_sizes["validation"] == 20
    assert spec.split_sizes["id_test"] == 20
    for s in ("train", "validation", "id_test", "test"):
        for e in getattr(spec, f"{s}_groups"):
            assert e.n == sum(r.group == e.group for r in plan.splits[s])
    assert {e.group for e in spec.train_groups} == {"cat(a)", "dog(b)"}
    assert [e.additional for e in spec.test_groups] == [False, False, True, True]
    assert spec.shift_type == "marginal"


def test_dg_rows_carry_contexts_and_labels():
    subsets = make_world()
    plan = dg(SetSource(subsets))
    for r in plan.splits["train"][:50]:
        assert r.context in r.contexts
        assert all(r.image_id in subsets[f"{r.label}({c})"] for c in r.contexts)
        assert r.group == f"{r.label}({r.context})"


def test_dg_determinism_and_seed():
    s = SetSource(make_world())
    assert dg(s, seed=5).table().equals(dg(s, seed=5).table())
    assert not dg(s, seed=5).table().equals(dg(s, seed=6).table())


def test_dg_not_enough_images_names_group_and_overrides():
    with pytest.raises(EmptyResultError) as exc:
        dg(SetSource(make_world(n=200)), sizes=DGSizes())
    assert "has" in exc.value.what and "train_per_group" in exc.value.fix


def test_dg_empty_test_group_errors():
    g = lambda c, x: GroupDef(c, x, (x,), x)  # noqa: E731
    with pytest.raises(EmptyResultError, match="zzz"):
        domain_generalisation(
            "t",
            SetSource(make_world()),
            DGGroups(("cat", "dog"), (g("cat", "a"),), (g("dog", "zzz"),)),
            sizes=DGSizes(10, 1, 1),
        )


def test_dg_additional_test_groups_are_opt_in():
    plan = dg(SetSource(make_world()), sizes=DGSizes(50, 10, 10))
    assert {r.group for r in plan.splits["test"]} == {"cat(c)", "dog(c)"}
    capped = dg(SetSource(make_world()), sizes=DGSizes(50, 10, 10, additional_test_per_group=7))
    assert sum(r.group == "dog(a)" for r in capped.splits["test"]) == 7


def subpop(source, sizes, seed=0, pool=None):
    return subpopulation_shift(
        "s",
        source,
        majority=[GroupDef("cat", "indoor", ("a", "b", "c")), GroupDef("dog", "outdoor", ("d", "e", "f"))],
        minority=[GroupDef("cat", "outdoor", ("d", "e", "f")), GroupDef("dog", "indoor", ("a", "b", "c"))],
        sizes=sizes,
        seed=seed,
        pool=pool,
    )


def test_subpop_sizes_fraction_and_balance():
    sizes = SubpopSizes(train_per_class=300, minority_per_class=30, test_per_group=50, validation_per_class=40)
    plan = subpop(SetSource(make_world(n=6000)), sizes)
    tr = plan.splits["train"]
    assert len(tr) == 600
    per = {g: sum(r.group == g for r in tr) for g in ("cat(indoor)", "cat(outdoor)", "dog(outdoor)", "dog(indoor)")}
    assert per == {"cat(indoor)": 270, "cat(outdoor)": 30, "dog(outdoor)": 270, "dog(indoor)": 30}
    test = plan.splits["test"]
    assert len(test) == 200 and all(sum(r.group == g for r in test) == 50 for g in per)
    va = plan.splits["validation"]
    assert len(va) == 80 and sum(r.group == "cat(outdoor)" for r in va) == 4
    assert plan.spec.minority_fraction == MinorityFraction(target=0.1, achieved=0.1)
    assert plan.spec.shift_type == "conditional"
    ids = all_ids(plan)
    assert len(ids) == len(set(ids))


def test_subpop_majority_excludes_minority_images():
    subsets = make_world(n=6000)
    sizes = SubpopSizes(train_per_class=300, minority_per_class=30, test_per_group=50, validation_per_class=40)
    plan = subpop(SetSource(subsets), sizes)
    minority_cat = subsets["cat(d)"] | subsets["cat(e)"] | subsets["cat(f)"]
    for rows in plan.splits.values():
        assert not {r.image_id for r in rows if r.group == "cat(indoor)"} & minority_cat


def test_subpop_pool_and_size_errors():
    subsets = make_world(n=6000)
    sizes = SubpopSizes(train_per_class=300, minority_per_class=30, test_per_group=50, validation_per_class=40)
    with pytest.raises(EmptyResultError, match="pool"):
        subpop(SetSource(subsets), sizes, pool={"cat(outdoor)": 60})
    with pytest.raises(EmptyResultError, match="minority_per_class"):
        subpop(SetSource(subsets), SubpopSizes(train_per_class=300, minority_per_class=2000))
    assert SubpopSizes().with_fraction(0.06).minority_per_class == 51


def test_community_shift_train_is_largest_community():
    subsets = make_world(n=3000)
    comm = {
        "cat(a)": 0,
        "cat(b)": 0,
        "cat(c)": 1,
        "cat(d)": 1,
        "cat(e)": 2,
        "cat(f)": 2,
        "dog(a)": 0,
        "dog(b)": 0,
        "dog(c)": 0,
        "dog(d)": 1,
        "dog(e)": 1,
        "dog(f)": 1,
    }
    kept = [k for k in subsets if k not in ("cat(dog)", "dog(cat)")]
    src = SetSource(subsets, kept=kept, communities=comm)
    plan = community_shift(
        "bin-cat-dog",
        src,
        classes=["cat", "dog"],
        sizes=CommunitySizes(0.1, 0.2),
        distance_fn=lambda c, a, b: Distance(1.0 if c == "cat" else 3.0, "spectral", "ok"),
        distance_rule="test",
    )
    ids = all_ids(plan)
    assert len(ids) == len(set(ids))
    train_cat = {r.image_id for r in plan.splits["train"] if r.label == "cat"}
    assert train_cat <= subsets["cat(a)"] | subsets["cat(b)"]
    test_cat = {r.image_id for r in plan.splits["test"] if r.label == "cat"}
    assert test_cat and not test_cat & (subsets["cat(a)"] | subsets["cat(b)"])
    assert {r.community for r in plan.splits["test"] if r.label == "cat"} == {1, 2}
    assert plan.spec.distance.value == 2.0 and plan.spec.distance.metric == "spectral"
    with pytest.raises(OptionError, match="fractions"):
        community_shift("bin-cat-dog", src, classes=["cat", "dog"], sizes=CommunitySizes(0.5, 0.5))
    id_cat = len(
        ((subsets["cat(a)"] | subsets["cat(b)"]) - subsets["cat(dog)"])
        - set().union(*[subsets[f"dog({c})"] for c in "abcdef"])
    )
    n_cat = sum(r.label == "cat" for s in ("train", "validation", "id_test") for r in plan.splits[s])
    assert n_cat == id_cat


def test_collection_one_row_per_image_with_all_contexts():
    subsets = make_world(n=500, both=0)
    src = SetSource(subsets)
    plan = collection("class-cat", src, contexts={"cat": src.kept_contexts("cat")})
    rows = plan.splits["train"]
    cat_imgs = set().union(*[v for k, v in subsets.items() if k.startswith("cat(")])
    assert len(rows) == len(cat_imgs) == len({r.image_id for r in rows})
    for r in rows[:100]:
        assert set(r.contexts) == {k[4:-1] for k, v in subsets.items() if k.startswith("cat(") and r.image_id in v}
    assert plan.spec.shift_type == "none"


def test_plan_asserts_no_image_in_two_splits():
    r = Row("1", "cat", "cat(a)", "a", ("a",), 0)
    with pytest.raises(MetashiftError, match="leak"):
        TaskPlan("t", ["cat"], {"train": [r], "test": [r]}, ShiftSpec("t", "marginal", ("cat",), 0, {}))


def test_contexts_near_distance():
    d = {"a": 0.1, "b": 0.5, "c": 0.9, "d": float("nan")}
    assert contexts_near_distance(d, 0.55, 2) == ["b", "c"]
    with pytest.raises(EmptyResultError):
        contexts_near_distance(d, 0.5, 4)


def test_without_images_updates_sizes():
    plan = dg(SetSource(make_world()))
    drop = [plan.splits["train"][0].image_id, plan.splits["test"][0].image_id]
    p2 = plan.without_images(drop, missing=drop)
    assert p2.spec.split_sizes["train"] == plan.spec.split_sizes["train"] - 1
    assert p2.spec.skipped_images.n == 2


class _Distances:
    """Stands in for an Artifact: subset distances within class dog."""

    def __init__(self, d):
        self.d = d

    def distance(self, a, b):
        if b not in self.d:
            return DISCONNECTED
        return Distance(self.d[b], "spectral", "ok")


def test_dg_by_distance_picks_contexts_nearest_target():
    src = SetSource(make_world())
    d = _Distances({"dog(a)": 0.2, "dog(b)": 0.9, "dog(d)": 1.1, "dog(e)": 0.5})  # dog(f): no embedding
    plan = domain_generalisation_by_distance(
        "dg-d",
        src,
        d,
        DistanceTarget("dog", "c", 1.0, k=2),
        FixedContexts("cat", ("a",), ("c",)),
        sizes=DGSizes(30, 5, 5),
    )
    assert {e.group for e in plan.spec.train_groups} == {"cat(a)", "dog(b)", "dog(d)"}
    assert plan.spec.distance.value == pytest.approx(1.0) and plan.spec.distance.metric == "spectral"
    assert {e.group for e in plan.spec.test_groups} == {"cat(c)", "dog(c)"}
    ids = all_ids(plan)
    assert len(ids) == len(set(ids))
