"""The shift a task's splits actually have, measured from its rows (``ShiftSpec.measured``).

With Y the class and S the context, P(S, Y) = P(S) P(Y|S). S is the row's ``context`` (the context
part of its group, e.g. ``shelf``, ``indoor``, ``floor``), except where the contexts are meta-graph
communities numbered per class (``community-<k>``: community-matched tasks): there ``cat``'s
``community-1`` and ``dog``'s ``community-1`` are unrelated sets of contexts, so S is the
class-qualified community, the row's ``group`` (``cat(community-1)``) (:func:`context_variable`).
For every split X other than ``train``, comparing X with ``train``:

- ``p_s_tv``: total variation between P_train(S) and P_X(S), ½ Σ_s |p_train(s) − p_X(s)|;
- ``p_y_given_s_tv``: on the contexts both splits have, Σ_s p_X(s) TV(P_train(Y|s), P_X(Y|s)) /
  Σ_s p_X(s) (None when they share none; ``shared_mass`` = that denominator);
- ``dependence`` / ``dependence_train``: how much S says about Y inside one split, as a share of the
  most it can say given the split's P(Y): Σ_s p(s) TV(P(Y|s), P(Y)) / Σ_y p(y)(1 − p(y)) (0 when every
  context has the split's class mix, 1 when the context tells the class; the denominator is the
  largest value the sum takes for that P(Y), reached when S determines Y, since TV is convex), so a
  change of the class proportions alone does not move it;
- ``conditional`` = max(p_y_given_s_tv, |dependence_train − dependence|): where the test contexts
  are new, P(Y|S) can only be compared through how informative S is of Y on each side;
- ``p_y_tv``: TV between the class proportions: label shift, reported as its own part
  (``label_shift``, against ``p_y_threshold``); it is not a P(S) or P(Y|S) part, so it does not
  enter the type.

Rule (:data:`RULE`): a part shifts when its figure exceeds both :data:`FLOOR` (0.05) and the 95th
percentile of the same figure over :data:`PERMUTATIONS` random re-splits of the two splits' rows
(same sizes, ``numpy.random.default_rng(0)``): sampling noise alone does not make a shift. Where the
splits share no context, ``conditional`` is |Δ dependence| alone and so is its null (like with like). Type:
P(S) only -> marginal, P(Y|S) only -> conditional, both -> joint, neither -> none. The task's
measured type is its ``test`` split's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from .spec import MeasuredShift, ShiftType, SplitShift


FLOOR = 0.05
PERMUTATIONS = 200
QUANTILE = 0.95
RULE = (
    "S = the row's context (its group, i.e. the class-qualified community, where contexts are communities "
    "numbered per class); dependence = sum_s P(s) TV(P(Y|s), P(Y)) / sum_y P(y)(1 - P(y)); "
    f"a part shifts when its total-variation figure exceeds {FLOOR} and the "
    f"{int(QUANTILE * 100)}th percentile over {PERMUTATIONS} random re-splits (seed 0); P(S) only: marginal, "
    "P(Y|S) only (conditional = max(TV of P(Y|S) on shared contexts, change in S-Y dependence); the change "
    "alone, against its own re-split percentile, where no context is shared): "
    "conditional, both: joint, neither: none; label shift (TV of P(Y)) is reported beside the type, by the "
    "same threshold rule"
)
COMPARED: tuple[ShiftType, ...] = ("marginal", "conditional", "joint", "none")
# community-matched tasks: the measurement on the paper's context tags, in MeasuredShift.note (starts with this)
CONTEXT_TAGS = "on the paper's context tags (S = each of an image's context tags)"


class _RowLike(Protocol):
    label: str
    group: str
    context: str


def _per_class_communities(rows: Sequence[_RowLike]) -> bool:
    return bool(rows) and all(r.context.startswith("community-") for r in rows)


def context_variable(splits: Mapping[str, Sequence[_RowLike]]) -> str:
    """``group`` where every row's context is a per-class community label (``community-<k>``), else
    ``context``: the row attribute that is S."""
    every = [r for rows in splits.values() for r in rows]
    return "group" if _per_class_communities(every) else "context"


def _batch(counts_a: np.ndarray, counts_b: np.ndarray) -> dict[str, np.ndarray]:
    """The figures of (..., context, class) count tables, a = train, b = the compared split, over any
    leading batch axes (the permutations); p_y_given_s is NaN where the splits share no context."""
    na, nb = counts_a.sum((-2, -1)), counts_b.sum((-2, -1))
    sa, sb = counts_a.sum(-1), counts_b.sum(-1)
    ps_a, ps_b = sa / na[..., None], sb / nb[..., None]
    py_a, py_b = counts_a.sum(-2) / na[..., None], counts_b.sum(-2) / nb[..., None]
    cond_a = counts_a / np.maximum(sa, 1)[..., None]  # rows of absent contexts are 0 and weighted 0 below
    cond_b = counts_b / np.maximum(sb, 1)[..., None]
    shared = (sa > 0) & (sb > 0)
    mass = (ps_b * shared).sum(-1)
    tv_cond = 0.5 * np.abs(cond_a - cond_b).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        pys = np.where(mass > 0, (ps_b * shared * tv_cond).sum(-1) / mass, np.nan)
    dep_a = _normalised((ps_a * 0.5 * np.abs(cond_a - py_a[..., None, :]).sum(-1)).sum(-1), py_a)
    dep_b = _normalised((ps_b * 0.5 * np.abs(cond_b - py_b[..., None, :]).sum(-1)).sum(-1), py_b)
    return {
        "p_s": 0.5 * np.abs(ps_a - ps_b).sum(-1),
        "p_y_given_s": pys,
        "mass": mass,
        "dep_a": dep_a,
        "dep_b": dep_b,
        "conditional": np.maximum(np.nan_to_num(pys), np.abs(dep_a - dep_b)),
        "p_y": 0.5 * np.abs(py_a - py_b).sum(-1),
    }


def _normalised(dependence: np.ndarray, p_y: np.ndarray) -> np.ndarray:
    """The dependence as a share of its largest value for these class proportions, sum_y p(y)(1 - p(y))
    (0 where one class holds every row: S can say nothing)."""
    most = (p_y * (1 - p_y)).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(most > 1e-12, dependence / np.where(most > 1e-12, most, 1), 0.0)


def _type(marginal: bool, conditional: bool) -> ShiftType:
    return (
        "joint" if marginal and conditional else "marginal" if marginal else "conditional" if conditional else "none"
    )


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def observed_and_null(
    code: np.ndarray, n_a: int, n_contexts: int, n_labels: int
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The figures of the rows coded ``code`` (context index * n_labels + class index; the first ``n_a`` are
    train), and of :data:`PERMUTATIONS` random re-splits of them. The re-splits permute the codes in sorted order,
    so the null depends only on the two splits' (context, class) counts, not on the rows' order: the counts a spec
    records reproduce it (:func:`design_check`)."""
    k = n_contexts * n_labels

    def tables(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(batch, context, class) counts of train (first n_a rows) and the other split, per row of codes."""
        off = np.arange(codes.shape[0])[:, None] * k
        a = np.bincount((codes[:, :n_a] + off).ravel(), minlength=k * len(codes))
        b = np.bincount((codes[:, n_a:] + off).ravel(), minlength=k * len(codes))
        shape = (len(codes), n_contexts, n_labels)
        return a.reshape(shape).astype(np.float64), b.reshape(shape).astype(np.float64)

    f = {key: float(v[0]) for key, v in _batch(*tables(code[None, :])).items()}
    rng = np.random.default_rng(0)  # fixed: the same rows always give the same thresholds
    null = _batch(*tables(rng.permuted(np.tile(np.sort(code), (PERMUTATIONS, 1)), axis=1)))
    return f, null


def measure_split(
    train: Sequence[_RowLike], other: Sequence[_RowLike], split: str, variable: str = "context"
) -> SplitShift:
    """``other`` (split ``split``) against ``train``, with the permutation thresholds (module docstring);
    S is each row's ``variable`` attribute (:func:`context_variable`)."""
    rows = list(train) + list(other)
    values = [getattr(r, variable) for r in rows]
    contexts = sorted(set(values))
    labels = sorted({r.label for r in rows})
    s_idx, y_idx = {c: i for i, c in enumerate(contexts)}, {c: i for i, c in enumerate(labels)}
    code = np.array([s_idx[v] * len(labels) + y_idx[r.label] for v, r in zip(values, rows)], dtype=np.int64)
    n_a = len(train)
    f, null = observed_and_null(code, n_a, len(contexts), len(labels))
    pys = None if np.isnan(f["p_y_given_s"]) else float(f["p_y_given_s"])
    # like with like: without shared contexts the figure is |Δ dependence| alone, so its null is too
    # (a re-split always shares contexts, and its shared-context TV would inflate the threshold)
    null_c = null["conditional"] if pys is not None else np.abs(null["dep_a"] - null["dep_b"])
    q_s, q_c = float(np.quantile(null["p_s"], QUANTILE)), float(np.quantile(null_c, QUANTILE))
    q_y = float(np.quantile(null["p_y"], QUANTILE))
    p_s, cond = float(f["p_s"]), float(f["conditional"])
    p_y, mass, dep_b = float(f["p_y"]), float(f["mass"]), float(f["dep_b"])
    return SplitShift(
        split=split,
        n=len(other),
        p_s_tv=_r(p_s),
        p_y_given_s_tv=_r(pys),
        shared_mass=_r(mass),
        dependence=_r(dep_b),
        conditional=_r(cond),
        p_y_tv=_r(p_y),
        p_s_threshold=_r(max(FLOOR, q_s)),
        conditional_threshold=_r(max(FLOOR, q_c)),
        p_y_threshold=_r(max(FLOOR, q_y)),
        label_shift=p_y > max(FLOOR, q_y),
        type=_type(p_s > max(FLOOR, q_s), cond > max(FLOOR, q_c)),
    )


def measure(splits: Mapping[str, Sequence[_RowLike]], declared: str) -> MeasuredShift | None:
    """Every split against ``train`` (None without a train split). The declared type is the design; where the
    measured one differs, ``agrees`` is False and the plan's note gives the verdict (tasks/design_check.py)."""
    train = splits.get("train")
    if not train:
        return None
    variable = context_variable(splits)
    parts = tuple(measure_split(train, rows, s, variable) for s, rows in splits.items() if s != "train" and rows)
    dep_train = _r(_dependence(train, variable))
    test = next((p for p in parts if p.split == "test"), None)
    measured: ShiftType = test.type if test is not None else "none"
    agrees = declared == measured
    construction, note = _construction(declared, measured)
    if variable == "group" and test is not None and not note:
        note = _on_context_tags(train, splits["test"])
    return MeasuredShift(
        rule=RULE,
        dependence_train=dep_train,
        splits=parts,
        type=measured,
        agrees=agrees,
        note=note,
        by_construction=construction,
    )


class _Tag:
    """One (image, context tag) pair of a row: the paper's subsets ``class(tag)`` overlap, an image is in one per tag."""

    __slots__ = ("label", "group", "context")

    def __init__(self, label: str, tag: str) -> None:
        self.label, self.group, self.context = label, f"{label}({tag})", tag


def _tags(rows: Sequence[_RowLike]) -> list[_Tag]:
    return [_Tag(r.label, t) for r in rows for t in (getattr(r, "contexts", None) or ())]


def _on_context_tags(train: Sequence[_RowLike], test: Sequence[_RowLike]) -> str:
    """Community-matched tasks (S = the class-qualified community, where a P(Y|S) shift cannot show): the same
    measurement with S = the paper's context tags, one (image, tag) pair per tag of a row ("" without tags). The
    pairs of one image are not independent, so its re-split thresholds are a lower bound."""
    a, b = _tags(train), _tags(test)
    if not a or not b:
        return ""
    t = measure_split(a, b, "test")
    cond = f"{t.conditional:.3f} (threshold {t.conditional_threshold:.3f})"
    return (
        f"{CONTEXT_TAGS}: {t.type}: P(S) TV {t.p_s_tv:.3f} (threshold {t.p_s_threshold:.3f}), P(Y|S) shift {cond}, "
        f"over {len(a):,} train and {len(b):,} test (image, tag) pairs; an image's pairs are not independent, "
        "so these thresholds are a lower bound"
    )


def _construction(declared: str, measured: ShiftType) -> tuple[str, str]:
    """(construction, note) for a declared value that is not a shift type (``clustered``: it names how the
    OOD sets were made), with the measurement beside it; ("", "") otherwise."""
    if declared in COMPARED:
        return "", ""
    return (
        "clustered OOD sets",
        f"declared {declared!r} names how the OOD sets were made, not a shift type; "
        f"measured {measured} on S = the row's context",
    )


def _dependence(rows: Sequence[_RowLike], variable: str = "context") -> float:
    contexts = sorted({getattr(r, variable) for r in rows})
    labels = sorted({r.label for r in rows})
    t = np.zeros((len(contexts), len(labels)))
    s_idx, y_idx = {c: i for i, c in enumerate(contexts)}, {c: i for i, c in enumerate(labels)}
    for r in rows:
        t[s_idx[getattr(r, variable)], y_idx[r.label]] += 1
    return float(_batch(t, t)["dep_a"])


__all__ = [
    "CONTEXT_TAGS",
    "FLOOR",
    "PERMUTATIONS",
    "RULE",
    "context_variable",
    "measure",
    "measure_split",
    "observed_and_null",
]
