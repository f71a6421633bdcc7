"""Declared = measured (issue 38 part 2): every plannable task of every family, sampled on the builder
world (matched by wordnet_match) and a COCO world, has the shift type its rows measure
(metashift_hf/tasks/measured.py); a designed level declares its design and the measurement's verdict stands
beside it (issue 45: tasks/design_check.py). Community-matched tasks are measured
on S = the class-qualified community and report their label shift P(Y) as its own part."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import CocoInstances
from metashift_hf.cards.shift_words import community_words, measured_words
from metashift_hf.core.errors import EmptyGroupError, EmptyResultError
from metashift_hf.sources.coco_world import write_coco_world
from metashift_hf.tasks import families as tasks
from metashift_hf.tasks import measured
from metashift_hf.tasks.design_check import design_check
from metashift_hf.tasks.spec import ShiftSpec


def _supported(spec: ShiftSpec) -> bool:
    """Issue 45: a designed level declares its design (whatever its size) and the measurement's verdict stands
    beside it: consistent, underpowered (a designed delta within its null), or contradicts only where the design
    leaves a part to the data (a joint level at delta = 0 balances the classes over s1/s2, not within each training
    context). Every other task declares what its rows measure."""
    check = design_check(spec)
    lev = spec.level
    if lev is None or spec.paper is not None:
        return spec.measured.agrees
    design = {"marginal": "marginal", "conditional": "conditional" if lev.delta else "none"}.get(
        lev.type, "joint" if lev.delta else "marginal"
    )
    if spec.shift_type != design or check is None:
        return False
    if check.verdict == "contradicts":
        return lev.type == "joint" and not lev.delta and check.measured == "joint"
    return check.verdict == "consistent" or (check.verdict == "underpowered" and bool(lev.delta))


def _plan_all(art: Artifact, most: int | None = None) -> dict[str, list[ShiftSpec]]:
    """Specs of every family's plannable ids (``most``: at most that many per family, spread over its ids)."""
    planned: dict[str, list[ShiftSpec]] = {}
    for fam in tasks.families():
        ids = fam.ids(art)
        if most is not None and len(ids) > most:
            ids = [ids[round(i * (len(ids) - 1) / (most - 1))] for i in range(most)]
        for tid in ids:
            plan = None
            # the paper's sizes exceed a small world: plan at its documented --set scale
            for scale in (None, 0.5, 0.25) if fam.name.startswith("paper-") else (None,):
                try:
                    plan = tasks.plan_task(tid, art, **({} if scale is None else {"scale": scale}))
                    break
                except EmptyResultError:
                    continue
                except EmptyGroupError:  # a matched class with a single community: no OOD test set
                    break
            if plan is not None:
                planned.setdefault(fam.name, []).append(plan.spec)
    return planned


@pytest.fixture(scope="module")
def coco_art(tmp_path_factory) -> Artifact:
    world = write_coco_world(tmp_path_factory.mktemp("declared-coco") / "world", seed=3)
    return build_from_inputs(
        tmp_path_factory.mktemp("declared-coco-art") / "a",
        CocoInstances(sorted((world / "annotations").glob("instances_*.json"))),
        plots=False,
    )


def _check_every_family(planned: dict[str, list[ShiftSpec]]) -> None:
    assert set(planned) >= {
        "paper-dg",
        "paper-subpop",
        "paper-coco-subpop",
        "collections",
        "class",
        "matched",
        "shift-marginal",
        "shift-conditional",
        "shift-joint",
    }, sorted(planned)
    wrong = [
        f"{s.task_id}: declared {s.shift_type}, measured {s.measured.type} ({s.measured.by_construction!r})"
        for specs in planned.values()
        for s in specs
        if not _supported(s)
    ]
    assert wrong == []


def _both_worlds(matched, coco_art, most: int | None) -> dict[str, list[ShiftSpec]]:
    planned = _plan_all(Artifact.load(matched), most)
    for fam, specs in _plan_all(coco_art, most).items():
        planned.setdefault(fam, []).extend(specs)
    return planned


def test_a_sample_of_every_family_declares_what_it_measures(matched, coco_art):
    planned = _both_worlds(matched, coco_art, most=3)
    _check_every_family(planned)
    assert sum(len(v) for v in planned.values()) >= 20


@pytest.mark.slow  # ~35 s on two busy cores: every plannable id of both worlds
def test_every_task_of_every_family_declares_what_it_measures(matched, coco_art):
    planned = _both_worlds(matched, coco_art, most=None)
    _check_every_family(planned)
    counts = Counter(s.measured.agrees for specs in planned.values() for s in specs)
    assert counts[True] >= 100, counts  # 114 agree, 4 are designed deltas within their null (2026-11-28)


def test_community_matched_tasks_measure_class_qualified_communities(matched):
    art = Artifact.load(matched)
    spec = tasks.plan_task("bin-cat-dog", art).spec
    m, test = spec.measured, spec.measured.split("test")
    assert spec.shift_type == m.type == "marginal" and m.agrees and m.by_construction == ""
    # issue 45: the same measurement on the paper's context tags (one pair per image and tag), beside it
    assert m.note.startswith(measured.CONTEXT_TAGS) and "(image, tag) pairs" in m.note
    assert "class-qualified community" in m.rule
    # each community belongs to one class: S tells Y completely on both sides, P(Y|S) does not move
    assert m.dependence_train == 1.0 and test.dependence == 1.0 and test.conditional == 0.0
    assert test.p_s_tv == 1.0  # train and test communities are disjoint
    # label shift is its own part: the classes' other communities hold other shares of the images
    plan = tasks.plan_task("bin-cat-dog", art)
    share = {s: Counter(r.label for r in plan.splits[s]) for s in ("train", "test")}
    p = {s: {c: share[s][c] / sum(share[s].values()) for c in spec.classes} for s in share}
    assert test.p_y_tv == pytest.approx(0.5 * sum(abs(p["train"][c] - p["test"][c]) for c in spec.classes), abs=1e-6)
    assert test.label_shift == (test.p_y_tv > test.p_y_threshold) and test.p_y_threshold >= measured.FLOOR
    words = measured_words(spec)
    assert "label shift" in words and f"{test.p_y_tv:.3f}" in words
    text = community_words(spec)
    assert "largest meta-graph community" in text and f"{test.p_y_tv:.3f}" in text
    assert f"Measured {measured.CONTEXT_TAGS}" in text and measured.CONTEXT_TAGS in words  # the card says both
    tags = [t for r in plan.splits["train"] for t in r.contexts]
    assert f"over {len(tags):,} train" in m.note


def test_label_shift_alone_is_not_a_context_shift():
    """S determines Y in both splits and only the class proportions move: no P(Y|S) shift, a label shift."""

    class R:
        def __init__(self, label: str, context: str) -> None:
            self.label, self.context, self.group = label, context, f"{label}({context})"

    train = [R("cat", "community-0")] * 50 + [R("dog", "community-0")] * 50
    test = [R("cat", "community-1")] * 40 + [R("cat", "community-2")] * 40 + [R("dog", "community-1")] * 20
    splits = {"train": train, "test": test}
    assert measured.context_variable(splits) == "group"
    m = measured.measure(splits, "marginal")
    t = m.split("test")
    assert (t.p_s_tv, t.conditional, t.p_y_tv) == (1.0, 0.0, 0.3) and t.label_shift and t.dependence == 1.0
    assert m.type == "marginal" and m.agrees
    # the per-class label as S (the old variable): cat's community-2 has no dog counterpart, so the test's
    # labels seem to tell the class and a P(Y|S) shift appears that the task does not have
    assert measured.measure_split(train, test, "test", "context").type == "joint"


def test_the_docs_quote_the_generated_label_shift_figures():
    """docs/tasks.md's prose on community-matched tasks quotes the label shift of the generated block
    (scripts/docs_figures.py writes the block; tests/test_docs_figures.py checks it against the code)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "tasks.md").read_text()
    block = text[text.index("<!-- docs-figures: matched-tasks-demo -->") : text.index("<!-- /docs-figures: matched")]
    label = {
        row.split("|")[1].strip().strip("`"): row.split("|")[-2].split()[0]
        for row in block.splitlines()
        if row.startswith("| `")
    }
    sentence = f"P(Y) TV {label['bin-cat-dog']} for `bin-cat-dog` and {label['imagenet-5']} for\n`imagenet-5`"
    assert sentence in text
