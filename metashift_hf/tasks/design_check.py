"""The declared type is the design; the measurement checks it (issue 45 part 1).

A task declares the shift its construction makes (``ShiftSpec.shift_type``), whatever its size: a conditional
level with delta > 0 is ``conditional``, a joint level with delta > 0 ``joint``, and at delta = 0 a level is what its
design is at every distance (the conditional control ``none``; a joint level ``marginal``: new contexts, classes
balanced over the training values s1/s2). Neither the MetaShift paper nor the OOD-testing paradigms paper relabels a
designed level by a significance test. Beside it, the rows' measurement (metashift_hf/tasks/measured.py, the test
split against train) gives a verdict, :func:`design_check`:

- ``consistent``: the rows show exactly the parts (P(S), P(Y|S)) the design shifts;
- ``underpowered``: the rows show no part the design does not set, but miss the designed P(Y|S) part, and the level
  has fewer rows than a test of its designed delta needs for power 0.8 (:func:`rows_needed`);
- ``contradicts``: the rows show a part the design does not set, or miss a designed part with rows enough to see it.

Each part carries its permutation p-value, (1 + #{re-splits with a figure >= the observed one}) / (1 + re-splits)
over the same :data:`measured.PERMUTATIONS` re-splits whose 95th percentile is the part's threshold (the null
depends only on the (split, context, class) counts, which the spec's groups record, so the verdict is computed from
the spec alone: ``tasks show``, the card, the experiments and the Space read the same one).

Rows needed (:func:`rows_needed`): the designed P(Y|S) change as a comparison of two proportions, P(class A | s1) in
train (``ConditionalFacts.p_a_given_s1_train`` = 1/2 + delta) against test (``p_a_given_s1_test``: 1/2 balanced,
1/2 - delta reversed; 1/2 where the test contexts are new and class-balanced, joint levels), with the level's
train:test ratio k; the normal-approximation sample size for unequal groups (Fleiss, Levin & Paik, Statistical
Methods for Rates and Proportions, 3rd ed., eq. 4.19 without continuity correction):

    n_train = (z_{1-a/2} sqrt(pbar (1 - pbar) (1 + 1/k)) + z_{power} sqrt(p1 (1 - p1) + p2 (1 - p2) / k))^2 / (p1 - p2)^2

with a = 0.05 two-sided (the thresholds' 95th percentile of an absolute figure), power 0.8, pbar = (p1 + k p2) /
(1 + k); rows needed = n_train + k n_train, rounded up. It is an approximation of the permutation test's power (the
statistic is the P(Y|S) figure of measured.py, not a pooled z), stated as such wherever it is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

import numpy as np

from .measured import PERMUTATIONS, observed_and_null
from .spec import ShiftSpec, ShiftType


Verdict = Literal["consistent", "underpowered", "contradicts"]
ALPHA = 0.05
POWER = 0.8
_PARTS: dict[str, frozenset[str]] = {
    "marginal": frozenset({"P(S)"}),
    "conditional": frozenset({"P(Y|S)"}),
    "joint": frozenset({"P(S)", "P(Y|S)"}),
    "none": frozenset(),
}
_TOL = 1e-6  # the spec stores figures rounded to 6 digits


@dataclass(frozen=True)
class DesignCheck:
    """The declared (designed) type beside the test split's measurement, with the verdict."""

    declared: ShiftType
    measured: ShiftType
    verdict: Verdict
    p_value_p_s: float | None  # permutation p-value of the P(S) figure (None: the spec's counts do not give it)
    p_value_conditional: float | None  # of the P(Y|S) figure
    rows: int  # train + test rows
    rows_needed: int | None  # train + test rows for power 0.8 at the designed delta (None: no designed delta)
    why: str  # one sentence, with the figures


def rows_needed(p_train: float, p_test: float, k: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Train + test rows (test = k x train) to tell P(A|s1) = ``p_train`` from ``p_test`` with ``power`` at two-sided
    level ``alpha`` (module docstring); None where the two are equal (nothing to detect) or k is not positive."""
    if abs(p_train - p_test) < 1e-12 or k <= 0:
        return None
    z_a, z_b = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    pbar = (p_train + k * p_test) / (1 + k)
    root = z_a * math.sqrt(pbar * (1 - pbar) * (1 + 1 / k)) + z_b * math.sqrt(
        p_train * (1 - p_train) + p_test * (1 - p_test) / k
    )
    n_train = root**2 / (p_train - p_test) ** 2
    return math.ceil(n_train) + math.ceil(k * n_train)


def _context_of(group: str, qualified: bool) -> str | None:
    """S of a group's rows: its ``(context)`` part, or the whole name where contexts are per-class communities."""
    if not group.endswith(")") or "(" not in group:
        return None
    return group if qualified else group[group.index("(") + 1 : -1]


def _p_values(spec: ShiftSpec) -> tuple[float | None, float | None]:
    """(P(S), P(Y|S)) permutation p-values of the test split, from the counts of the spec's train and test groups;
    (None, None) where those counts do not reproduce the measured figures (a group mixing contexts)."""
    m = spec.measured
    test = m.split("test") if m is not None else None
    inner = [g.group[g.group.find("(") + 1 : -1] for g in (*spec.train_groups, *spec.test_groups)]
    if test is None or not inner:
        return None, None
    qualified = all(x.startswith("community-") for x in inner)
    cells: dict[str, dict[tuple[str, str], int]] = {"train": {}, "test": {}}
    for split in ("train", "test"):
        for g in getattr(spec, f"{split}_groups"):
            s = _context_of(g.group, qualified)
            if s is None:
                return None, None
            cells[split][(s, g.cls)] = cells[split].get((s, g.cls), 0) + g.n
    contexts = sorted({s for c in cells.values() for s, _ in c})
    labels = sorted({y for c in cells.values() for _, y in c})
    s_idx, y_idx = {c: i for i, c in enumerate(contexts)}, {c: i for i, c in enumerate(labels)}
    keys = [(s, y, n) for split in ("train", "test") for (s, y), n in cells[split].items()]
    code = np.repeat(
        np.array([s_idx[s] * len(labels) + y_idx[y] for s, y, _ in keys], dtype=np.int64), [n for *_, n in keys]
    )
    n_train = sum(cells["train"].values())
    f, null = observed_and_null(code, n_train, len(contexts), len(labels))
    if abs(f["p_s"] - test.p_s_tv) > _TOL or abs(f["conditional"] - test.conditional) > _TOL:
        return None, None
    # like with like, as measured.measure_split: without shared contexts the figure is |Δ dependence| alone
    null_c = null["conditional"] if test.p_y_given_s_tv is not None else np.abs(null["dep_a"] - null["dep_b"])

    def p(observed: float, draws: np.ndarray) -> float:
        return round((1 + int(np.sum(draws >= observed - 1e-12))) / (1 + PERMUTATIONS), 4)

    return p(f["p_s"], null["p_s"]), p(f["conditional"], null_c)


def _parts(parts: frozenset[str]) -> str:
    return " and ".join(sorted(parts)) if parts else "no"


@dataclass(frozen=True)
class _Design:
    """What the verdict is decided from: the declared and measured parts, the rows and the rows power needs."""

    designed: frozenset[str]
    shown: frozenset[str]
    rows: int
    needed: int | None

    @property
    def verdict(self) -> Verdict:
        missing, extra = self.designed - self.shown, self.shown - self.designed
        if not missing and not extra:
            return "consistent"
        if not extra and missing == {"P(Y|S)"} and self.needed is not None and self.rows < self.needed:
            return "underpowered"
        return "contradicts"


def _design(spec: ShiftSpec) -> _Design | None:
    m = spec.measured
    test = m.split("test") if m is not None else None
    if test is None or spec.shift_type not in _PARTS or m.type not in _PARTS:
        return None
    n_train = spec.split_sizes.get("train", 0)
    cf = spec.conditional
    needed = None
    if cf is not None and n_train:
        p_test = cf.p_a_given_s1_test if cf.p_a_given_s1_test is not None else 0.5
        needed = rows_needed(cf.p_a_given_s1_train, p_test, test.n / n_train)
    return _Design(_PARTS[spec.shift_type], _PARTS[m.type], n_train + test.n, needed)


def design_verdict(spec: ShiftSpec) -> Verdict | None:
    """:func:`design_check`'s verdict alone, without the permutation p-values its sentence quotes (a listing of
    thousands of tasks asks for this); None where nothing is designed to compare."""
    design = _design(spec)
    return design.verdict if design is not None else None


def design_check(spec: ShiftSpec) -> DesignCheck | None:
    """The verdict on ``spec``'s declared type from its test split's measurement (module docstring); None where
    nothing is designed to compare (no test split measured, or a declared type that is not a shift type)."""
    design = _design(spec)
    if design is None:
        return None
    m, cf = spec.measured, spec.conditional
    test = m.split("test")
    designed, rows, needed = design.designed, design.rows, design.needed
    p_s, p_c = _p_values(spec)
    figures = (
        f"P(S) TV {test.p_s_tv:.3f} (threshold {test.p_s_threshold:.3f}, p = {_p(p_s)}), P(Y|S) shift "
        f"{test.conditional:.3f} (threshold {test.conditional_threshold:.3f}, p = {_p(p_c)}), {rows:,} train + test rows"
    )
    missing, extra = designed - design.shown, design.shown - designed
    verdict = design.verdict
    if verdict == "consistent":
        why = (
            f"the rows show the designed {_parts(designed)} shift: {figures}"
            if designed
            else f"the rows show no shift, as designed: {figures}"
        )
    elif verdict == "underpowered":
        why = (
            f"the designed P(Y|S) shift (P({cf.class_a} | s1) {cf.p_a_given_s1_train:g} in train) is within sampling "
            f"noise at this size: {figures}; power {POWER:g} at the designed shift needs about {needed:,} rows "
            "(two-proportion approximation)"
        )
    elif extra:
        why = f"the rows show a {_parts(extra)} shift the design does not set: {figures}"
    else:
        enough = f"; power {POWER:g} needs about {needed:,} rows" if needed is not None else ""
        why = f"the rows do not show the designed {_parts(missing)} shift: {figures}{enough}"
    return DesignCheck(spec.shift_type, m.type, verdict, p_s, p_c, rows, needed, why)


def with_verdict(spec: ShiftSpec) -> ShiftSpec:
    """``spec`` whose measurement differs from its declared type (and is not typed by a construction) with the
    verdict's sentence as the measurement's note: the spec says why, for every reader."""
    m = spec.measured
    check = design_check(spec)
    if m is None or m.agrees or m.by_construction or check is None:
        return spec
    return replace(spec, measured=replace(m, note=f"{check.verdict}: {check.why}"))


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


__all__ = ["ALPHA", "POWER", "DesignCheck", "Verdict", "design_check", "design_verdict", "rows_needed", "with_verdict"]
