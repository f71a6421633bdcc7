"""Statistics used by the evaluator, against values worked out by hand."""

import math

import numpy as np
import pytest

from metashift_hf.scoring.stats import benjamini_hochberg, two_proportion_test, wilson_interval


def test_wilson_hand_values():
    # 0/10: the upper bound is z^2 / (n + z^2)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(3.8414588 / 13.8414588, abs=1e-6)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.236593, abs=1e-5), pytest.approx(0.763407, abs=1e-5))
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(10 / 13.8414588, abs=1e-6)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_two_proportion_hand_values():
    z, p = two_proportion_test(2, 20, 30, 40)
    pooled = 32 / 60
    se = math.sqrt(pooled * (1 - pooled) * (1 / 20 + 1 / 40))
    assert z == pytest.approx((0.1 - 0.75) / se)
    assert z == pytest.approx(-4.7574, abs=1e-3)
    assert 0 < p < 1e-5
    z, p = two_proportion_test(9, 10, 1, 10)  # subset better than the rest: no evidence of a bug
    assert z > 0 and p > 0.99
    assert two_proportion_test(5, 5, 7, 7) == (0.0, 1.0)


def test_benjamini_hochberg_hand_values():
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(q, [0.02, 0.04, 0.04, 0.02])
    np.testing.assert_allclose(benjamini_hochberg([0.5, 0.9]), [0.9, 0.9])
    assert benjamini_hochberg([]).size == 0


def test_scipy_wilson_and_bh_equal_the_closed_forms():
    """The statistics are scipy's; these are the formulas they replaced, to 1e-12."""
    z = 1.959963984540054
    for n in (1, 2, 7, 30, 113):
        for k in range(n + 1):
            p, z2 = k / n, z * z
            centre = (p + z2 / (2 * n)) / (1 + z2 / n)
            half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
            lo, hi = wilson_interval(k, n)
            assert lo == pytest.approx(max(0.0, centre - half), abs=1e-12)
            assert hi == pytest.approx(min(1.0, centre + half), abs=1e-12)
            assert (k > 0 or lo == 0.0) and (k < n or hi == 1.0)  # exact at 0/n and n/n
    rng = np.random.default_rng(0)
    for m in (1, 2, 5, 40):
        p = rng.random(m) ** 3
        p[: m // 3] = p[0]  # ties
        order = np.argsort(p, kind="stable")
        q_sorted = np.minimum.accumulate((p[order] * m / np.arange(1, m + 1))[::-1])[::-1]
        expected = np.empty(m)
        expected[order] = np.minimum(q_sorted, 1.0)
        np.testing.assert_allclose(benjamini_hochberg(p), expected, atol=1e-12)
