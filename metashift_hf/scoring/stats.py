"""Small-sample statistics for accuracies: Wilson intervals, two-proportion test, Benjamini–Hochberg."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.stats import binomtest, false_discovery_control, norm


CONFIDENCE = 0.95


def wilson_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (scipy's); (nan, nan) when n == 0.

    Wilson rather than the normal approximation because context subsets are small and accuracies
    near 0 or 1 are common; Wilson never leaves [0, 1] and keeps coverage close to nominal.
    """
    if n < 0 or correct < 0 or correct > n:
        raise ValueError(f"need 0 <= correct <= n, got correct={correct}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    ci = binomtest(int(correct), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def two_proportion_test(x1: int, n1: int, x2: int, n2: int) -> tuple[float, float]:
    """One-sided pooled two-proportion z-test of H1: p1 < p2. Returns (z, p_value).

    Without variance (both groups all correct or all wrong) there is no evidence: z = 0, p = 1.
    """
    if n1 <= 0 or n2 <= 0:
        raise ValueError(f"both groups need images, got n1={n1}, n2={n2}")
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0.0:
        return (0.0, 1.0)
    z = (x1 / n1 - x2 / n2) / se
    return (z, float(norm.cdf(z)))


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values), in the input order (scipy's)."""
    p = np.asarray(p_values, dtype=np.float64)
    return p if p.size == 0 else false_discovery_control(p, method="bh")
