"""ShiftSpec.measured (metashift_hf/tasks/measured.py): P(S) and P(Y|S) shift figures measured from the rows, a
type derived by the documented rule, and the declared type agreeing with it (or the spec saying why),
over every task family."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass

import numpy as np
import pytest

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import CocoInstances
from metashift_hf.cards.shift_words import measured_words
from metashift_hf.core.errors import EmptyGroupError, EmptyResultError, InputFormatError, MetashiftError
from metashift_hf.sources.coco_world import write_coco_world
from metashift_hf.space import index as space_index
from metashift_hf.tasks import families as tasks
from metashift_hf.tasks import measured
from metashift_hf.tasks.design_check import design_check, design_verdict
from metashift_hf.tasks.match_artifact import MatchInputs, run_match
from metashift_hf.tasks.spec import SPEC_VERSION, ShiftSpec


@dataclass(frozen=True)
class R:
    label: str
    context: str


def rows(spec: dict[tuple[str, str], int]) -> list[R]:
    return [R(y, s) for (y, s), n in spec.items() for _ in range(n)]


def test_hand_computed_figures():
    train = rows({("cat", "sofa"): 30, ("dog", "sofa"): 10, ("cat", "grass"): 10, ("dog", "grass"): 30})
    # same contexts, same P(S), P(cat|sofa) 0.75 -> 0.5 and P(cat|grass) 0.25 -> 0.5: TV 0.25 everywhere
    balanced = rows({("cat", "sofa"): 20, ("dog", "sofa"): 20, ("cat", "grass"): 20, ("dog", "grass"): 20})
    s = measured.measure_split(train, balanced, "test")
    assert (s.p_s_tv, s.p_y_given_s_tv, s.shared_mass, s.dependence, s.p_y_tv) == (0.0, 0.25, 1.0, 0.0, 0.0)
    assert s.conditional == 0.5 and s.type == "conditional" and s.n == 80  # |Δ dependence|: 0.25 of at most 0.5
    # new contexts, class-balanced in both: P(S) shifts entirely, S says nothing about Y anywhere
    flat = rows({("cat", "sofa"): 20, ("dog", "sofa"): 20})
    new = rows({("cat", "shelf"): 25, ("dog", "shelf"): 25})
    s = measured.measure_split(flat, new, "test")
    assert (s.p_s_tv, s.p_y_given_s_tv, s.shared_mass, s.conditional) == (1.0, None, 0.0, 0.0) and s.type == "marginal"
    # new contexts, and S tells Y in training only (the paper DG shape): joint; the dependence is a share
    # of its largest value for the split's P(Y) (S determines Y in train: 1)
    s = measured.measure_split(rows({("cat", "sofa"): 20, ("dog", "boat"): 20}), new, "test")
    assert (s.p_s_tv, s.conditional) == (1.0, 1.0) and s.type == "joint"
    # the same rows on both sides: nothing shifts, and a small wobble stays under the permutation threshold
    assert measured.measure_split(train, train, "test").type == "none"
    wobble = rows({("cat", "sofa"): 29, ("dog", "sofa"): 11, ("cat", "grass"): 10, ("dog", "grass"): 30})
    s = measured.measure_split(train, wobble, "test")
    assert 0 < s.conditional < s.conditional_threshold and s.type == "none"
    assert s.conditional_threshold >= measured.FLOOR and s.p_s_threshold >= measured.FLOOR


def test_declared_type_and_the_design_reasons():
    train = rows({("cat", "sofa"): 20, ("dog", "sofa"): 20})
    # a declared shift type the rows do not show keeps no reason: _consistent flags it (plans declare as measured)
    plain = measured.measure({"train": train, "test": train}, "conditional")
    assert plain.type == "none" and not plain.agrees and plain.note == plain.by_construction == ""
    clustered = measured.measure({"train": train, "test": train}, "clustered")
    assert clustered.by_construction == "clustered OOD sets" and "measured none" in clustered.note
    assert measured.measure({"train": train}, "none").splits == ()
    assert measured.measure({"test": train}, "none") is None


def _consistent(spec: ShiftSpec) -> None:
    m = spec.measured
    assert m is not None, spec.task_id
    assert m.rule == measured.RULE
    for s in m.splits:
        assert s.split != "train" and s.n == spec.split_sizes[s.split]
        assert 0 <= s.p_s_tv <= 1 and 0 <= s.conditional <= 1 and s.shared_mass <= 1 + 1e-9
        marginal, conditional = s.p_s_tv > s.p_s_threshold, s.conditional > s.conditional_threshold
        expect = (
            "joint"
            if marginal and conditional
            else "marginal"
            if marginal
            else "conditional"
            if conditional
            else "none"
        )
        assert s.type == expect, (spec.task_id, s)
    test = m.split("test")
    if "test" in spec.split_sizes:
        assert test is not None and m.type == test.type, spec.task_id
    assert m.agrees == (m.type == spec.shift_type), spec.task_id
    # issue 45: the declared type is the design; a measurement that differs gives its verdict in the note
    # (design_check); only `clustered` (not a shift type) names its construction instead
    check = design_check(spec)
    if m.by_construction:  # the construction is shown with the measurement beside it
        assert spec.shift_type == "clustered" and f"measured {m.type}" in m.note and check is None
    elif m.agrees:  # community-matched tasks: the measurement on the paper's context tags beside it
        assert m.note == "" or m.note.startswith(measured.CONTEXT_TAGS), spec.task_id
        assert check is None or check.verdict == "consistent", spec.task_id
    else:
        assert check is not None and check.verdict != "consistent", spec.task_id
        assert m.note == f"{check.verdict}: {check.why}", spec.task_id
    for s in m.splits:  # label shift: its own part, by the same threshold rule
        assert s.label_shift == (s.p_y_tv > s.p_y_threshold) and s.p_y_threshold >= measured.FLOOR


DEMO_IDS = [
    "paper-dg-cat-dog-1",
    "paper-dg-cat-dog-2",
    "paper-dg-cat-dog-3",
    "paper-dg-cat-dog-4",
    "paper-subpop-cat-dog-p12",
    "paper-subpop-cat-dog-p6",
    "paper-subpop-cat-dog-p1",
    "classes",
    "class-cat",
    "shift-marginal-cat-dog-d0",
    "shift-marginal-cat-dog-d3-mix25",
    "shift-conditional-cat-dog-delta00",
    "shift-conditional-cat-dog-delta10",
    "shift-conditional-cat-dog-delta49-rev",
    "shift-joint-cat-dog-d0-delta00",
    "shift-joint-cat-dog-d1-delta10",
    "shift-joint-cat-dog-d2-delta49",
]


def test_every_family_on_the_demo_is_measured_and_consistent(demo_build):
    _, art = demo_build
    seen = set()
    for tid in DEMO_IDS:
        spec = tasks.plan_task(tid, art, **({"scale": 0.5} if tid.startswith("paper-") else {})).spec
        seen.add(tasks.family_of(art, tid).name)
        _consistent(spec)
        assert ShiftSpec.from_json(spec.to_json()) == spec
    assert seen >= {
        "paper-dg",
        "paper-subpop",
        "collections",
        "class",
        "shift-marginal",
        "shift-conditional",
        "shift-joint",
    }
    dg = [tasks.plan_task(f"paper-dg-cat-dog-{k}", art, scale=0.5).spec for k in (1, 4)]
    # the case: in -4 training every cat is indoor and no dog is, the test is all shelf: joint
    assert [s.shift_type for s in dg] == ["joint", "joint"] and all(s.measured.agrees for s in dg)
    assert dg[1].measured.split("test").p_s_tv == 1.0 and dg[1].measured.dependence_train == 1.0  # S tells Y: 1


def test_matched_and_coco_families_are_measured(matched, tmp_path_factory):
    art = Artifact.load(matched)
    spec = tasks.plan_task("bin-cat-dog", art).spec
    assert tasks.family_of(art, "bin-cat-dog").name == "matched"
    _consistent(spec)
    world = write_coco_world(tmp_path_factory.mktemp("measured-coco") / "world", seed=3)
    coco = build_from_inputs(
        tmp_path_factory.mktemp("measured-coco-art") / "a",
        given=CocoInstances(sorted((world / "annotations").glob("instances_*.json"))),
        plots=False,
    )
    spec = tasks.plan_task("paper-coco-subpop-cat-dog-p13", coco).spec
    _consistent(spec)


def test_old_specs_still_read(demo_build):
    _, art = demo_build
    spec = tasks.plan_task("paper-subpop-cat-dog-p1", art, scale=0.5).spec
    data = json.loads(spec.to_json())
    assert data["spec_version"] == SPEC_VERSION == 6
    data = {k: v for k, v in data.items() if k not in ("members", "facts_sha256")} | {
        "spec_version": 4
    }  # version 5: tests/test_facts.py
    # versions 2 and 3: no label-shift part, read as None
    pre = {
        **data["measured"],
        "splits": [
            {k: v for k, v in x.items() if k not in ("p_y_threshold", "label_shift")}
            for x in data["measured"]["splits"]
        ],
    }
    v1 = {k: v for k, v in data.items() if k != "measured"} | {"spec_version": 1}
    old = ShiftSpec.from_dict(v1)
    assert old.measured is None and old.spec_version == 1 and old.task_id == spec.task_id
    with pytest.raises(InputFormatError, match="measured"):
        ShiftSpec.from_dict(v1 | {"measured": None})
    # version 2: measured without by_construction, read as ""
    v2 = data | {"spec_version": 2, "measured": {k: v for k, v in pre.items() if k != "by_construction"}}
    two = ShiftSpec.from_dict(v2)
    assert two.spec_version == 2 and two.measured.by_construction == "" and two.measured.type == spec.measured.type
    assert all(x.label_shift is None and x.p_y_threshold is None for x in two.measured.splits)
    three = ShiftSpec.from_dict(data | {"spec_version": 3, "measured": pre})
    assert three.measured.split("test").p_y_tv == spec.measured.split("test").p_y_tv
    with pytest.raises(InputFormatError, match="label-shift"):
        ShiftSpec.from_dict(data | {"spec_version": 3})
    with pytest.raises(InputFormatError, match="by_construction"):
        ShiftSpec.from_dict(v2 | {"measured": pre})
    with pytest.raises(InputFormatError, match="by_construction"):
        ShiftSpec.from_dict(data | {"spec_version": 3, "measured": v2["measured"]})  # version 3 requires it
    with pytest.raises(InputFormatError, match="spec_version 7"):
        ShiftSpec.from_dict(data | {"spec_version": 7})


def test_no_shared_context_compares_dependence_with_its_own_null():
    """Issue 26.3: without shared contexts the figure is |Δ dependence|; its threshold must be the 95th
    percentile of |Δ dependence| over re-splits, not of max(shared-context TV, |Δ dependence|)."""
    train = rows({("cat", "sofa"): 12, ("dog", "sofa"): 6, ("cat", "rug"): 6, ("dog", "rug"): 12})
    test = rows({("cat", "grass"): 18, ("dog", "grass"): 18})
    s = measured.measure_split(train, test, "test")
    assert s.p_y_given_s_tv is None and s.shared_mass == 0.0
    # the threshold recomputed by hand from the same permutations (seed 0) of the pooled rows' sorted codes
    pooled = train + test
    ctx, lab = sorted({r.context for r in pooled}), sorted({r.label for r in pooled})
    code = np.sort(np.array([ctx.index(r.context) * len(lab) + lab.index(r.label) for r in pooled]))
    perm = np.random.default_rng(0).permuted(np.tile(code, (measured.PERMUTATIONS, 1)), axis=1)
    gaps = [
        abs(
            measured._dependence([R(lab[c % 2], ctx[c // 2]) for c in p[: len(train)]])
            - measured._dependence([R(lab[c % 2], ctx[c // 2]) for c in p[len(train) :]])
        )
        for p in perm
    ]
    assert s.conditional == pytest.approx(1 / 3, abs=1e-6)  # raw 1/6 of at most 1/2 for P(Y) = (1/2, 1/2)
    assert s.conditional_threshold == pytest.approx(
        max(measured.FLOOR, np.quantile(gaps, measured.QUANTILE)), abs=1e-6
    )
    assert s.type == "joint"


@pytest.mark.slow
def test_every_plannable_demo_task_of_every_family_is_typed(demo_build, tmp_path_factory):
    """Issue 26.3 done-when: over ALL task ids of every family on the demo world (matched tasks from the
    demo artifact matched by wordnet_match), the declared type is the measured test type, or the task
    is typed by construction with the measurement in its note."""
    _, art = demo_build
    root = tmp_path_factory.mktemp("measured-all") / "artifact"
    shutil.copytree(art.root, root)
    try:
        run_match(
            MatchInputs(artifact=str(root), hierarchy="wordnet", cache_dir=tmp_path_factory.mktemp("wn-measured"))
        )
    except MetashiftError as exc:  # WordNet dict files not installed here
        pytest.skip(f"wordnet_match unavailable: {exc.what}")
    art = Artifact.load(root)
    planned: dict[str, list[ShiftSpec]] = {}
    for fam in tasks.families():
        for tid in fam.ids(art):
            try:
                plan = tasks.plan_task(tid, art)
            except EmptyResultError:  # the paper's sizes exceed the demo: plan at the documented --set scale
                plan = tasks.plan_task(tid, art, scale=0.5) if fam.name.startswith("paper-") else None
            except EmptyGroupError:  # a matched pair whose class has one community: no OOD test set
                plan = None
            if plan is not None:
                _consistent(plan.spec)
                planned.setdefault(fam.name, []).append(plan.spec)
    assert set(planned) >= {
        "paper-dg",
        "paper-subpop",
        "collections",
        "class",
        "matched",
        "shift-marginal",
        "shift-conditional",
        "shift-joint",
    }
    assert len(planned["paper-dg"]) == 4 and len(planned["paper-subpop"]) == 3 and len(planned["matched"]) > 40
    specs = {s.task_id: s for ss in planned.values() for s in ss}
    # issue 45: every designed level declares its design, whatever its size; the measurement's verdict stands beside
    # it. On the demo three differ: delta10's (and joint d3-delta10's) designed P(Y|S) shift is within its null at its
    # size (underpowered), and the joint d0 level at delta 0 shows a P(Y|S) shift its design does not set (its training
    # contexts lean). 141 tasks: 140 and subpopbench-cat-dog (issue 45.2; a random split: none, consistent)
    assert len(specs) == 141 and specs["subpopbench-cat-dog"].shift_type == "none"
    verdicts = {t: design_check(s) for t, s in specs.items()}
    # the listing's verdict (no p-values) is design_check's, task by task
    assert {t: design_verdict(s) for t, s in specs.items()} == {t: c and c.verdict for t, c in verdicts.items()}
    off = {t: c.verdict for t, c in verdicts.items() if c is not None and c.verdict != "consistent"}
    assert off == {
        "shift-conditional-cat-dog-delta10": "underpowered",
        "shift-joint-cat-dog-d3-delta10": "underpowered",
        "shift-joint-cat-dog-d0-delta00": "contradicts",
    }, off
    d10 = specs["shift-conditional-cat-dog-delta10"]
    c10 = verdicts["shift-conditional-cat-dog-delta10"]
    assert d10.shift_type == "conditional" and d10.measured.type == "none" and 0.05 < c10.p_value_conditional < 0.2
    # docs/tasks.md and docs/experiments.md quote these: p about 0.08 at 244 rows, about 839 needed
    assert round(c10.p_value_conditional, 2) == 0.08 and c10.rows == 244 and c10.rows_needed == 839
    assert d10.measured.note.startswith("underpowered: ")
    # the Space shows the same verdict and sentence (its tasks table and the task page)
    assert space_index.entry(d10, "repo", d10.task_id).verdict == "underpowered"
    assert space_index._measured_note(d10, c10).startswith("declared conditional (the design); verdict: underpowered")
    for t in [t for t in specs if t.startswith("shift-")]:  # the design, by level name
        level = specs[t].level
        want = {"marginal": "marginal", "conditional": "conditional" if level.delta else "none"}.get(
            level.type, "joint" if level.delta else "marginal"
        )
        assert specs[t].shift_type == want, t
    # the shift-joint tasks the old null measured `marginal` measure as designed (d3-delta10 is underpowered above)
    for tid in [f"shift-joint-cat-dog-d{d}-delta{x}" for d in (1, 2, 3) for x in ("10", "20")]:
        m = specs[tid].measured
        if tid != "shift-joint-cat-dog-d3-delta10":
            assert m.type == "joint" and m.agrees and m.by_construction == "" and m.note == "", tid
    # community-matched tasks, measured on the class-qualified community: marginal as declared, label
    # shift beside it (issue 38.2; they measured joint on the per-class community-<k> labels)
    for tid in ("bin-cat-dog", "imagenet-5", "animals-10"):
        m = specs[tid].measured
        assert m.agrees and m.type == "marginal" and m.by_construction == "" and "class-qualified" in m.rule
    assert all(s.measured.agrees for s in planned["matched"])
    card = measured_words(specs["bin-cat-dog"])
    assert "declared marginal (the design); verdict: consistent" in card and "label shift: P(class) TV" in card
    # delta = 0 levels declare what they are, at every distance: the conditional control none, joint levels marginal
    assert specs["shift-conditional-cat-dog-delta00"].shift_type == "none"
    assert [specs[f"shift-joint-cat-dog-d{d}-delta00"].shift_type for d in range(4)] == ["marginal"] * 4


def test_a_no_shift_level_is_not_called_a_collection(demo_build):
    """The level declared `none` (the conditional delta = 0 control) keeps its train/test splits: cards, `tasks show`
    and the Space must not call it a collection without a designed shift, and the leak check stays strict (only a
    collection may list an image once per class). delta10 declares its design, conditional, at any size."""
    from metashift_hf.cards.shift_words import first_sentence, shift_in_words, shift_label

    _, art = demo_build
    collection = tasks.plan_task("classes", art).spec
    assert collection.collection and shift_label(collection) == "no designed shift"
    assert "no designed shift" in first_sentence(collection)
    spec = tasks.plan_task("shift-conditional-cat-dog-delta00", art).spec
    assert spec.shift_type == "none" and not spec.collection and spec.test_groups
    words = first_sentence(spec) + shift_in_words(spec)
    assert "no designed shift" not in words.lower() and "collection" not in words and "a no-shift control" in words
    assert shift_label(spec) == "no measured shift"
    d10 = tasks.plan_task("shift-conditional-cat-dog-delta10", art).spec
    assert d10.shift_type == "conditional" and shift_label(d10) == "subpopulation shift"
    words = measured_words(d10)
    assert "declared conditional (the design); verdict: underpowered" in words and "needs about" in words


def test_rows_needed_is_the_two_proportion_sample_size():
    """Fleiss, Levin & Paik eq. 4.19 (no continuity correction): 0.5 vs 0.6, alpha 0.05 two-sided, power 0.8 needs
    388 per group (the textbook table); unequal groups follow the same formula with k = n_test / n_train."""
    from metashift_hf.tasks.design_check import rows_needed

    assert rows_needed(0.6, 0.5, 1.0) == 388 + 388
    assert rows_needed(0.6, 0.4, 1.0) == 97 + 97  # twice the difference: about a quarter of the rows
    assert rows_needed(0.5, 0.5, 1.0) is None
    k = 88 / 156  # the demo's delta10 level: more rows than its 244
    assert rows_needed(0.6, 0.5, k) > 244


def test_design_check_p_values_come_from_the_spec_and_match_the_rows():
    """The verdict is computed from the spec alone: the (split, context, class) counts of its groups reproduce the
    measured figures and the permutation null (sorted codes), so the p-value sides with the threshold."""
    train = rows({("cat", "sofa"): 30, ("dog", "sofa"): 10, ("cat", "grass"): 10, ("dog", "grass"): 30})
    test = rows({("cat", "sofa"): 20, ("dog", "sofa"): 20, ("cat", "grass"): 20, ("dog", "grass"): 20})
    shuffled = list(reversed(train))  # the null does not depend on the rows' order
    a, b = measured.measure_split(train, test, "test"), measured.measure_split(shuffled, test, "test")
    assert a == b
