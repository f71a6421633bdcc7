"""Curve summaries (slope, AUC, knee) and ID/OOD rank agreement on hand-computed cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from metashift_hf.core.errors import EmptyResultError
from metashift_hf.research.level_curves import (
    MIN_MODELS_FOR_P,
    curve_summary,
    format_p,
    pooled_agreement,
    rank_agreement,
)


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


def test_no_p_value_below_the_minimum_number_of_models():
    r = rank_agreement([0.6, 0.7, 0.8], [0.5, 0.6, 0.7])  # the case: rho = 1 with 3 models
    assert r["n_models"] == 3 and r["spearman_rho"] == pytest.approx(1.0)
    assert r["kendall_p"] is None and r["spearman_p"] is None and "3 models" in r["p_note"]
    assert MIN_MODELS_FOR_P == 5


def test_exact_permutation_p_values():
    # 5 models in the same order: 2 of the 120 pairings (this one and its reverse) are as extreme
    r = rank_agreement([0.6, 0.7, 0.8, 0.9, 1.0], [0.5, 0.6, 0.7, 0.8, 0.9])
    assert r["kendall_p"] == pytest.approx(2 / 120) and r["spearman_p"] == pytest.approx(2 / 120)
    a, b = [0.1, 0.5, 0.3, 0.9, 0.7, 0.2], [0.3, 0.4, 0.1, 0.8, 0.9, 0.0]
    r = rank_agreement(a, b)
    assert r["kendall_p"] == pytest.approx(stats.kendalltau(a, b, method="exact").pvalue)
    # Spearman's exact p by brute force over the 720 pairings
    rho = stats.spearmanr(a, b).statistic
    null = [stats.spearmanr(a, [b[i] for i in p]).statistic for p in itertools.permutations(range(6))]
    assert r["spearman_p"] == pytest.approx(np.mean(np.abs(null) >= abs(rho) - 1e-12))


def test_pooled_agreement_moves_whole_models():
    rng = np.random.default_rng(1)
    id_acc = rng.random((5, 4))
    same = pooled_agreement(id_acc, id_acc + 0.01)  # every level ranks the 5 models alike
    # only the observed pairing reaches 1 (levels order the models differently, so no pairing gives -1)
    assert same["mean_kendall_tau"] == pytest.approx(1.0) and same["p_value"] == pytest.approx(1 / 120)
    ood = id_acc + rng.normal(0, 0.3, size=id_acc.shape)
    r = pooled_agreement(id_acc, ood)
    taus = [stats.kendalltau(id_acc[:, j], ood[:, j]).statistic for j in range(4)]
    assert r["mean_kendall_tau"] == pytest.approx(np.mean(taus)) and r["n_models"] == 5 and r["n_levels"] == 4
    # the null pairs model i's ID row with model pi(i)'s whole OOD row
    null = [
        np.mean([stats.kendalltau(id_acc[:, j], ood[list(p), j]).statistic for j in range(4)])
        for p in itertools.permutations(range(5))
    ]
    assert r["p_value"] == pytest.approx(np.mean(np.abs(null) >= abs(r["mean_kendall_tau"]) - 1e-12))
    few = pooled_agreement(id_acc[:3], ood[:3])
    assert few["p_value"] is None and few["n_models"] == 3 and few["mean_kendall_tau"] is not None


def test_p_values_never_print_as_zero():
    assert format_p(None) == "-" and format_p(1e-9) == "< 0.001" and format_p(0.0421) == "0.042"
