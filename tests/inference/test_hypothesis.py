"""Permutation test and TOST: known answers, and the permutation p-value's null distribution."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from headstab.inference.hypothesis import gap_replicates, permutation_test, tost


def test_permutation_p_value_is_uniform_under_the_null():
    rng = np.random.default_rng(0)
    p = np.array([permutation_test(rng.normal(size=8), rng.normal(size=8), 199, seed=s)["p_value"] for s in range(400)])
    # P(p <= 0.05) = 0.05 under exchangeability (p is on a grid of 1/200); 400 draws: s.d. 1.1%.
    assert 0.02 <= np.mean(p <= 0.05) <= 0.085
    assert stats.kstest(p, "uniform").pvalue > 0.001


def test_permutation_test_finds_a_real_difference_and_tests_layers_separately():
    x = np.array([[0.50, 0.7], [0.52, 0.7], [0.51, 0.7], [0.49, 0.7]])
    y = x + np.array([0.2, 0.0])
    result = permutation_test(x, y, 999, seed=1)
    np.testing.assert_allclose(result["difference"], [0.2, 0.0])
    assert result["p_value"][0] == pytest.approx(2 / 70, abs=0.02)  # 2 of the C(8, 4) = 70 splits as extreme
    assert result["p_value"][1] == 1.0


def test_tost_by_hand():
    x, y = np.array([10.0, 10.2, 9.8, 10.0]), np.array([10.1, 10.3, 9.9, 10.1])
    result = tost(x, y, margin=1.0)
    se = np.sqrt(x.var(ddof=1) / 4 + y.var(ddof=1) / 4)  # equal variances: Welch dof = 6
    assert result["difference"] == pytest.approx(0.1)
    assert result["p_upper"] == pytest.approx(stats.t.cdf((0.1 - 1.0) / se, 6))
    assert result["p_lower"] == pytest.approx(stats.t.sf((0.1 + 1.0) / se, 6))
    assert result["equivalent"]
    assert not tost(x, y, margin=0.05)["equivalent"]
    with pytest.raises(ValueError, match="margin"):
        tost(x, y, margin=0.0)


def test_gap_of_layer_stability_rows():
    gap = gap_replicates(np.array([[0.6, 0.9, 0.5, 0.7], [0.8, 0.8, 0.2, 0.3]]))
    np.testing.assert_allclose(gap["delta_s"], [0.4, 0.6])
    np.testing.assert_allclose(gap["r_max"], [2 / 4, 1 / 4])  # ties: the shallowest
    np.testing.assert_allclose(gap["r_min"], [3 / 4, 3 / 4])
