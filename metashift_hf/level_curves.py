"""Accuracy-vs-level curves of the shift families, and agreement of ID and OOD accuracy across models.

For one model and shift type, levels x (distance d for marginal, delta for conditional, the level
rank for the joint grid's rows) and accuracies y:

* slope: least-squares line through (x, y), accuracy per unit of x;
* AUC: trapezoid area under y over x divided by the x range (the curve's mean accuracy, in [0, 1]);
* knee: the first level whose accuracy falls below 90% of level 0's (None when none does).

Across models: Kendall's tau and Spearman's rho between ID and OOD accuracy (scipy.stats).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from .core.errors import EmptyResultError, InputFormatError

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
        raise InputFormatError(f"{len(names)} names, {len(x)} levels, {len(y)} accuracies", "pass one of each per level")
    if len(x) < 2 or np.ptp(x) == 0:
        return CurveSummary(None, None, None, None, len(x))
    slope = float(np.polyfit(x, y, 1)[0])
    order = np.argsort(x, kind="stable")
    auc = float(np.trapezoid(y[order], x[order]) / np.ptp(x))
    below = [i for i in range(1, len(y)) if y[i] < KNEE_FRACTION * y[0]]
    knee = below[0] if below else None
    return CurveSummary(slope, auc, None if knee is None else str(names[knee]),
                        None if knee is None else float(x[knee]), len(x))


def rank_agreement(id_acc: Sequence[float], ood_acc: Sequence[float]) -> dict:
    """Kendall's tau and Spearman's rho (with p-values) between ID and OOD accuracy across models."""
    from scipy import stats  # loaded where the agreement is computed

    a, b = np.asarray(id_acc, dtype=float), np.asarray(ood_acc, dtype=float)
    if a.shape != b.shape:
        raise InputFormatError(f"{a.size} ID and {b.size} OOD accuracies", "pass one pair per model")
    if a.size < 2:
        raise EmptyResultError(f"rank agreement needs two models or more, got {a.size}", "pass more --models")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"n_models": int(a.size), "kendall_tau": None, "kendall_p": None, "spearman_rho": None,
                "spearman_p": None, "note": "constant accuracies: ranks undefined"}
    kt = stats.kendalltau(a, b)
    sr = stats.spearmanr(a, b)
    return {"n_models": int(a.size), "kendall_tau": float(kt.statistic), "kendall_p": float(kt.pvalue),
            "spearman_rho": float(sr.statistic), "spearman_p": float(sr.pvalue)}

