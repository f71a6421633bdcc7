"""Small-sample statistics for accuracies: Wilson intervals, two-proportion test, Benjamini–Hochberg."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.stats import norm

Z95 = float(norm.ppf(0.975))  # 1.959963984540054


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (nan, nan) when n == 0.

    Wilson rather than the normal approximation because context subsets are small and accuracies
    near 0 or 1 are common; Wilson never leaves [0, 1] and keeps coverage close to nominal.
    """
    if n < 0 or correct < 0 or correct > n:
        raise ValueError(f"need 0 <= correct <= n, got correct={correct}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    p = correct / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # at 0/n and n/n the bound is exactly 0 or 1; avoid float dust like 0.9999999999999999
    lo = 0.0 if correct == 0 else max(0.0, centre - half)
    hi = 1.0 if correct == n else min(1.0, centre + half)
    return (lo, hi)


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
    """Benjamini–Hochberg adjusted p-values (q-values), in the input order."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    # enforce monotonicity from the largest p downwards
    q_sorted = np.minimum.accumulate(scaled[::-1])[::-1]
    q = np.empty(m)
    q[order] = np.minimum(q_sorted, 1.0)
    return q
