"""What a task shifts, in words and tables, from its ShiftSpec: the sentences, the shift table, the
measured shift."""

from __future__ import annotations

from metashift_hf.tasks import subpopbench
from metashift_hf.tasks.design_check import POWER, DesignCheck, design_check
from metashift_hf.tasks.measured import CONTEXT_TAGS
from metashift_hf.tasks.spec import GroupSpec, ShiftDistance, ShiftSpec, SplitShift

from .text import cell, fmt


def group_list(groups: "tuple[GroupSpec, ...]") -> str:
    """Group names (``class(context-group)``); their member contexts are in the groups table."""
    return ", ".join(g.group for g in groups) or "–"


def rule_note(dist: ShiftDistance) -> str:
    """Which distance rule gave the number (spectral / resistance), when the spec records it."""
    return f", {dist.metric} distance" if dist.metric else ""


def shift_in_words(spec: ShiftSpec) -> str:
    kind = spec.shift_type
    groups = spec.groups()
    classes = ", ".join(f"`{c}`" for c in spec.classes)
    dist = spec.distance
    d = (
        f" The train/test distance is d = {fmt(dist.value)} ({dist.rule} rule{rule_note(dist)})."
        if dist is not None and dist.value is not None
        else ""
    )
    if kind == "joint":  # paper DG tasks, shift-joint levels: new contexts, and contexts go with labels differently
        return (
            f"**Domain generalisation** with a context-label shift (joint shift: P(context) and P(label | context) "
            f"both change) over {classes}: the model is trained on images of each class in some contexts "
            f"({group_list(groups.get('train', []))}) and tested in other contexts "
            f"({group_list(groups.get('test', []))}).{d}"
        )
    if kind == "marginal" and is_community_task(spec):
        return community_words(spec) + d
    if kind == "marginal":
        return (
            f"**Domain generalisation** (marginal shift of the context distribution) over {classes}: the model is "
            f"trained on images of each class in some contexts ({group_list(groups.get('train', []))}) and tested in "
            f"other contexts ({group_list(groups.get('test', []))}) that it never saw in training.{d}"
        )
    if kind == "conditional":
        mf = spec.minority_fraction
        p = (
            f" Minority groups make up p = {fmt(mf.achieved)} of the training set (target {fmt(mf.target)})."
            if mf is not None
            else ""
        )
        return (
            f"**Subpopulation shift** (conditional shift: which contexts go with which label changes) over {classes}: "
            f"training and test sets contain the same kinds of groups in different proportions.{p} Train groups: "
            f"{group_list(groups.get('train', []))}; test groups: {group_list(groups.get('test', []))}.{d}"
        )
    if is_no_shift_level(spec):
        return (
            f"**No measured shift** over {classes}: {no_shift_reason(spec)}. Train groups: "
            f"{group_list(groups.get('train', []))}; test groups: {group_list(groups.get('test', []))}.{d}"
        )
    return (
        f"**No designed shift**: classes {classes} with every group in one split "
        f"({group_list(groups.get('train', []))}); use it as a whole-class collection or an in-distribution reference."
    )


def is_no_shift_level(spec: ShiftSpec) -> bool:
    """Declared ``none`` with train and test splits (the conditional family's delta = 0 control), unlike a
    collection (``ShiftSpec.collection``): its words say it is a no-shift control."""
    return spec.shift_type == "none" and not spec.collection


def no_shift_reason(spec: ShiftSpec) -> str:
    """Why a task with a test split declares no shift: its design shifts nothing (a declared type is the design,
    never the measurement: tasks/design_check.py)."""
    if spec.task_id == subpopbench.TASK_ID:
        return subpopbench.DESIGN_WORDS
    return "train and test hold the same kinds of groups in the same proportions (a no-shift control)"


def shift_label(spec: ShiftSpec) -> str:
    if is_no_shift_level(spec):
        return "no measured shift"
    return {
        "marginal": "domain generalisation",
        "joint": "domain generalisation (joint shift)",
        "conditional": "subpopulation shift",
    }.get(spec.shift_type, "no designed shift")


def summary(spec: ShiftSpec) -> str:
    kind = shift_label(spec)
    return f"Classify {', '.join(f'`{c}`' for c in spec.classes)} under {kind}."


def shift_table(spec: ShiftSpec) -> str:
    dist, mf = spec.distance, spec.minority_fraction
    groups = spec.groups()
    rows = [
        ("shift type", spec.shift_type),
        ("train groups", group_list(groups.get("train", ()))),
        ("test groups", group_list(groups.get("test", ()))),
        ("distance d", f"{fmt(dist.value)} ({dist.rule}{rule_note(dist)})" if dist is not None else "–"),
        ("minority fraction p", f"{fmt(mf.achieved)} (target {fmt(mf.target)})" if mf is not None else "–"),
        ("split sizes", ", ".join(f"{k}: {v}" for k, v in spec.split_sizes.items()) or "–"),
        ("measured shift (test vs train)", measured_words(spec) or "not measured (spec version 1)"),
    ]
    return "\n".join(f"| {a} | {cell(b)} |" for a, b in rows)


def measured_words(spec: ShiftSpec) -> str | None:
    """The shift measured from the rows (metashift_hf/tasks/measured.py), test split against train, in one line."""
    m = spec.measured
    test = None if m is None else (m.split("test") or (m.splits[-1] if m.splits else None))
    if test is None:
        return None
    shared = "" if test.p_y_given_s_tv is not None else "; no context shared, so from the class-context dependence"
    check = design_check(spec)
    # by construction (clustered OOD sets): the note says what and shows the figures
    agree = f"declared {spec.shift_type}: {m.note}" if m.by_construction or check is None else verdict_words(check)
    if m.note.startswith(CONTEXT_TAGS):  # community-matched tasks: the paper's context tags beside the communities
        agree += f"; measured {m.note}"
    return (
        f"{m.type}: P(context) TV {fmt(test.p_s_tv)} (counts above {fmt(test.p_s_threshold)}), P(class | context) "
        f"shift {fmt(test.conditional)} (counts above {fmt(test.conditional_threshold)}{shared}){_label(test)}; "
        f"{agree}"
    )


def verdict_words(check: DesignCheck) -> str:
    """The declared type (the design) and the measurement's verdict on it, with its p-values and, where it is
    underpowered, the rows a test of the designed delta needs (tasks/design_check.py)."""
    p = f"p = {_p(check.p_value_p_s)} for P(context), {_p(check.p_value_conditional)} for P(class | context)"
    head = f"declared {check.declared} (the design); verdict: {check.verdict}"
    if check.verdict == "underpowered":
        return (
            f"{head} ({p}; the designed P(class | context) shift is within sampling noise at {check.rows:,} train + "
            f"test rows, power {POWER:g} at the designed delta needs about {check.rows_needed:,}: two-proportion "
            "approximation)"
        )
    if check.verdict == "contradicts":
        return f"{head} ({check.why.split(':')[0]}; {p})"
    return f"{head} ({p})"


def _p(p: float | None) -> str:
    return "not recoverable from the groups" if p is None else f"{p:.3g}"


def _label(test: SplitShift) -> str:
    """The label-shift part (spec_version 4 on): P(class) TV against its own threshold; not in the type."""
    if test.label_shift is None:
        return ""
    where = "above" if test.label_shift else "within"
    return f"; label shift: P(class) TV {fmt(test.p_y_tv)} ({where} its threshold {fmt(test.p_y_threshold)})"


def is_community_task(spec: ShiftSpec) -> bool:
    """Trained on each class's largest meta-graph community, tested on its other communities (the
    matched tasks: ``shifts.community_shift``)."""
    train, test = spec.train_groups, spec.test_groups
    return bool(train and test) and all(g.group.endswith(")") and "(community-" in g.group for g in (*train, *test))


def community_words(spec: ShiftSpec) -> str:
    """What a community-matched task shifts, with its measured figures ("" for other tasks)."""
    m = spec.measured
    test = m.split("test") if m is not None else None
    if not is_community_task(spec) or test is None:
        return ""
    single = {g.group[g.group.index("(") :] for g in spec.train_groups} == {"(community-0)"}
    env = (
        " Every training row has community 0, so methods that use the community as the environment (IRM, "
        "CORAL, domain-balanced sampling) see a single training environment."
        if single
        else ""
    )
    label = (
        f" and the class proportions move with the communities' sizes: label shift P(class) TV "
        f"{fmt(test.p_y_tv)} ({'above' if test.label_shift else 'within'} its re-split threshold "
        f"{fmt(test.p_y_threshold)})"
        if test.label_shift is not None
        else ""
    )
    tags = (
        f"Measured {m.note}"
        if m.note.startswith(CONTEXT_TAGS)
        else "Not measured on the paper's context tags (the rows carry none)"
    )
    return (
        "**What a community-matched task shifts.** Each class is trained on its largest meta-graph community "
        f"({few_groups(spec.train_groups)}) and tested on its other communities ({few_groups(spec.test_groups)}). "
        "A community is one class's set of contexts, so the context is measured as the class-qualified community: "
        f"P(context) shifts (TV {fmt(test.p_s_tv)}), P(class | context) does not (each community belongs to one "
        f"class: class-context dependence {fmt(m.dependence_train)} in train, {fmt(test.dependence)} in test; "
        f"shift {fmt(test.conditional)}){label}. Measured type: {m.type} (declared {spec.shift_type}). {tags}.{env}"
    )


def shift_groups_table(spec: ShiftSpec) -> str:
    """One row per group (its splits listed): the row counts live in the Splits and groups table."""
    first: dict[str, GroupSpec] = {}
    splits: dict[str, list[str]] = {}
    for split, groups in spec.groups().items():
        for g in groups:
            first.setdefault(g.group, g)
            if split not in splits.setdefault(g.group, []):
                splits[g.group].append(split)
    rows = [
        f"| `{cell(name)}` | {cell(g.cls)} | {', '.join(splits[name])} | {cell(', '.join(g.contexts) or '–')} |"
        for name, g in first.items()
    ]
    return "\n".join(rows) or "| – | – | – | – |"


def few_groups(groups: "tuple[GroupSpec, ...]", most: int = 6) -> str:
    """Group names for one sentence: all of a few, else the first ones and how many (the tables list all)."""
    if len(groups) <= most:
        return group_list(groups)
    return f"{group_list(groups[: most - 2])} and {len(groups) - (most - 2)} more groups"


def first_sentence(spec: ShiftSpec) -> str:
    """The one sentence a Hub visitor needs first: train on what, test on what, and what shifts."""
    groups = spec.groups()
    train, test = few_groups(groups.get("train", ())), few_groups(groups.get("test", ()))
    dist = spec.distance
    d = f", meta-graph distance d = {fmt(dist.value)}" if dist is not None and dist.value is not None else ""
    what = {
        "marginal": "new contexts at test time (P(context) shifts)",
        "joint": "new contexts at test time, and which contexts go with which class changes "
        "(P(context) and P(class | context) shift)",
        "conditional": "the same kinds of groups in other proportions (P(class | context) shifts)",
    }
    if is_no_shift_level(spec):
        return f"**Train on {train}; test on {test}; no shift is measured: {no_shift_reason(spec)}.**"
    if spec.shift_type not in what:
        return (
            f"**Classify {', '.join(f'`{c}`' for c in spec.classes)}: train and test are drawn from the same "
            "groups; there is no designed shift.**"
        )
    return f"**Train on {train}; test on {test}; the shift is {what[spec.shift_type]}{d}.**"
