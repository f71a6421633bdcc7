"""Curve summaries (slope, AUC, knee) and ID/OOD rank agreement on hand-computed cases."""
from __future__ import annotations

import pytest

from metashift_hf.core.errors import EmptyResultError
from metashift_hf.level_curves import curve_summary, rank_agreement


def test_linear_curve():
    s = curve_summary(["d0", "d1", "d2", "d3"], [0, 1, 2, 3], [1.0, 0.9, 0.8, 0.7])
    assert s.slope == pytest.approx(-0.1) and s.auc == pytest.approx(0.85)
    assert s.knee == "d2" and s.knee_x == 2  # 0.8 < 0.9 * 1.0; 0.9 is not below
    flat = curve_summary(["a", "b"], [0, 1], [0.8, 0.75])
    assert flat.knee is None and flat.auc == pytest.approx(0.775)


def test_conditional_sharp_drop_and_unsorted_x():
    s = curve_summary(["x0", "x1", "x2"], [0.0, 0.49, 0.2], [0.8, 0.3, 0.79])
    assert s.knee == "x1" and s.knee_x == 0.49
    # trapezoid over sorted x: (0.2*(0.8+0.79)/2 + 0.29*(0.79+0.3)/2) / 0.49
    assert s.auc == pytest.approx((0.2 * 1.59 / 2 + 0.29 * 1.09 / 2) / 0.49)


def test_degenerate_curve():
    s = curve_summary(["only"], [0.0], [0.7])
    assert s.slope is None and s.auc is None and s.n_levels == 1


def test_rank_agreement():
    r = rank_agreement([0.6, 0.7, 0.8, 0.9], [0.5, 0.6, 0.7, 0.8])
    assert r["kendall_tau"] == pytest.approx(1.0) and r["spearman_rho"] == pytest.approx(1.0)
    r = rank_agreement([0.6, 0.7, 0.8], [0.8, 0.7, 0.6])
    assert r["kendall_tau"] == pytest.approx(-1.0) and r["spearman_rho"] == pytest.approx(-1.0)
    assert rank_agreement([0.5, 0.5], [0.1, 0.2])["kendall_tau"] is None
    with pytest.raises(EmptyResultError):
        rank_agreement([0.5], [0.4])
