"""Accuracy-vs-level curves of the shift families, and agreement of ID and OOD accuracy across models.

For one model and shift type, levels x (distance d for marginal, delta for conditional, the level
rank for the joint grid's rows) and accuracies y:

* slope: least-squares line through (x, y), accuracy per unit of x;
* AUC: trapezoid area under y over x divided by the x range (the curve's mean accuracy, in [0, 1]);
* knee: the first level whose accuracy falls below 90% of level 0's (None when none does).

Across models, per level: Kendall's tau-b and Spearman's rho between ID and OOD accuracy, n = the
number of models, with an exact permutation p-value only from MIN_MODELS_FOR_P models on. All levels at
once: the mean per-level tau, tested by permuting models (:func:`pooled_agreement`); the (model, level)
points are never pooled into one correlation, since one model's points are not independent.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from ..core.errors import EmptyResultError, InputFormatError


KNEE_FRACTION = 0.9


@dataclass(frozen=True)
class CurveSummary:
    slope: float | None
    auc: float | None
    knee: str | None  # level name
    knee_x: float | None
    n_levels: int

    def as_dict(self) -> dict:
        return asdict(self)


def curve_summary(names: Sequence[str], x: Sequence[float], y: Sequence[float]) -> CurveSummary:
    """Slope, normalised AUC and knee of one curve; levels in the order given (level 0 first)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if not (len(names) == len(x) == len(y)) or len(x) == 0:
        raise InputFormatError(
            f"{len(names)} names, {len(x)} levels, {len(y)} accuracies", "pass one of each per level"
        )
    if len(x) < 2 or np.ptp(x) == 0:
        return CurveSummary(None, None, None, None, len(x))
    slope = float(np.polyfit(x, y, 1)[0])
    order = np.argsort(x, kind="stable")
    auc = float(np.trapezoid(y[order], x[order]) / np.ptp(x))
    below = [i for i in range(1, len(y)) if y[i] < KNEE_FRACTION * y[0]]
    knee = below[0] if below else None
    return CurveSummary(
        slope, auc, None if knee is None else str(names[knee]), None if knee is None else float(x[knee]), len(x)
    )


MIN_MODELS_FOR_P = 5  # below this many models no p-value is given (n! arrangements: 4 models allow p >= 1/24)
PERMUTATIONS = 9999  # random permutations over models when n! is larger than this (seed 0)


def _tau_b(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of ``a`` (n,) against every row of ``b`` (m, n); NaN where a side is constant."""
    i, j = np.triu_indices(a.size, 1)
    sa = np.sign(a[j] - a[i])
    sb = np.sign(b[:, j] - b[:, i])
    den = np.sqrt(np.count_nonzero(sa) * np.count_nonzero(sb, axis=1).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (sb * sa).sum(axis=1) / np.where(den > 0, den, 1), np.nan)


def _arrangements(n: int) -> np.ndarray:
    """Every permutation of n models (n! <= PERMUTATIONS), else PERMUTATIONS seeded ones plus the identity."""
    if math.factorial(n) <= PERMUTATIONS:
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    rng = np.random.default_rng(0)
    return np.vstack([np.arange(n)] + [rng.permutation(n) for _ in range(PERMUTATIONS)])


def _p_value(observed: float, null: np.ndarray) -> float:
    """Two-sided permutation p-value: share of arrangements (the observed one included) at least as extreme."""
    return float(np.mean(np.abs(null) >= abs(observed) - 1e-12))


def rank_agreement(
    id_acc: Sequence[float], ood_acc: Sequence[float], *, min_models_for_p: int = MIN_MODELS_FOR_P
) -> dict:
    """Kendall's tau-b and Spearman's rho between ID and OOD accuracy across models (one point per model).

    n = the number of models. p-values (two-sided, exact permutation over the n! pairings of ID and OOD
    accuracies, or PERMUTATIONS seeded ones when n! is larger) only from ``min_models_for_p`` models on:
    with fewer, no p-value is given (``p_note`` says why). A p-value is never 0: the observed pairing is
    one of the arrangements counted.
    """
    from scipy import stats  # loaded where the agreement is computed

    a, b = np.asarray(id_acc, dtype=float), np.asarray(ood_acc, dtype=float)
    if a.shape != b.shape:
        raise InputFormatError(f"{a.size} ID and {b.size} OOD accuracies", "pass one pair per model")
    if a.size < 2:
        raise EmptyResultError(f"rank agreement needs two models or more, got {a.size}", "pass more --models")
    out = {
        "n_models": int(a.size),
        "kendall_tau": None,
        "spearman_rho": None,
        "kendall_p": None,
        "spearman_p": None,
        "p_note": None,
    }
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return {**out, "note": "constant accuracies: ranks undefined"}
    tau = float(stats.kendalltau(a, b).statistic)
    rho = float(stats.spearmanr(a, b).statistic)
    out.update(kendall_tau=tau, spearman_rho=rho)
    if a.size < min_models_for_p:
        out["p_note"] = f"no p-value with {a.size} models (fewer than {min_models_for_p})"
        return out
    perms = _arrangements(a.size)
    shuffled = b[perms]
    rank_a = stats.rankdata(a)
    rank_b = np.apply_along_axis(stats.rankdata, 1, shuffled)
    rho_null = np.array([np.corrcoef(rank_a, r)[0, 1] for r in rank_b])
    out.update(
        kendall_p=_p_value(tau, _tau_b(a, shuffled)),
        spearman_p=_p_value(rho, rho_null),
        p_note=f"two-sided permutation test over {len(perms)} pairings of the {a.size} models",
    )
    return out


def pooled_agreement(id_acc: np.ndarray, ood_acc: np.ndarray, *, min_models_for_p: int = MIN_MODELS_FOR_P) -> dict:
    """ID/OOD agreement over all levels at once, for (models x levels) accuracy tables.

    The (model, level) points are not independent (one model gives a point at every level), so they are not
    pooled into one correlation. Statistic: the mean over levels of the per-level Kendall tau-b across
    models. Its p-value comes from a permutation test over models: a model's OOD accuracies at every level
    move together to another model's ID accuracies (all n! pairings, or PERMUTATIONS seeded ones), which
    keeps the dependence between levels; no p-value below ``min_models_for_p`` models.
    """
    a, b = np.asarray(id_acc, dtype=float), np.asarray(ood_acc, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise InputFormatError(f"ID table {a.shape} and OOD table {b.shape}", "pass two (models x levels) tables")
    n, k = a.shape
    if n < 2:
        raise EmptyResultError(f"rank agreement needs two models or more, got {n}", "pass more --models")
    perms = _arrangements(n) if n >= min_models_for_p else np.arange(n)[None, :]
    taus = np.vstack([_tau_b(a[:, j], b[perms, j]) for j in range(k)])  # (levels, arrangements)
    defined = ~np.isnan(taus[:, 0])
    out = {
        "statistic": "mean over levels of Kendall tau-b between ID and OOD accuracy across models",
        "n_models": int(n),
        "n_levels": int(k),
        "levels_with_ranks": int(defined.sum()),
        "mean_kendall_tau": None,
        "p_value": None,
        "p_note": None,
    }
    if not defined.any():
        return {**out, "p_note": "constant accuracies at every level: ranks undefined"}
    stat = np.nanmean(taus[defined], axis=0)
    out["mean_kendall_tau"] = float(stat[0])
    if n < min_models_for_p:
        out["p_note"] = f"no p-value with {n} models (fewer than {min_models_for_p})"
    else:
        out["p_value"] = _p_value(stat[0], stat)
        out["p_note"] = (
            f"two-sided permutation test over {len(perms)} pairings of the {n} models (all levels move together)"
        )
    return out


def format_p(p: float | None) -> str:
    """A p-value for a table: '-' when none was computed, '< 0.001' for small ones (never '0.0')."""
    if p is None:
        return "-"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"
