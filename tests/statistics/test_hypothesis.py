"""Permutation test and TOST: known answers, and the permutation p-value's null distribution."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.tolerances import reduction_rtol
from scipy import stats

from headstab.statistics.hypothesis import benjamini_hochberg, gap_replicates, permutation_test, tost


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


def test_tost_matches_scipy_welch_tests_with_unequal_group_sizes():
    x, y = np.array([1.0, 1.4, 0.9]), np.array([1.2, 1.1, 1.6, 1.0, 1.3])
    result = tost(x, y, margin=0.5, alpha=0.1)
    lower = stats.ttest_ind(y + 0.5, x, equal_var=False, alternative="greater")
    upper = stats.ttest_ind(y - 0.5, x, equal_var=False, alternative="less")
    assert result["p_lower"] == pytest.approx(lower.pvalue)
    assert result["p_upper"] == pytest.approx(upper.pvalue)
    assert result["p_value"] == pytest.approx(max(lower.pvalue, upper.pvalue))
    interval = stats.ttest_ind(y, x, equal_var=False).confidence_interval(confidence_level=0.8)
    assert (result["ci_low"], result["ci_high"]) == pytest.approx((interval.low, interval.high))
    assert (result["margin"], result["alpha"]) == (0.5, 0.1)


def test_tost_of_constant_groups_is_decided_by_the_difference_alone():
    inside = tost(np.array([1.0, 1.0]), np.array([1.3, 1.3]), margin=0.5)
    assert (inside["p_value"], inside["equivalent"]) == (0.0, True)
    assert (inside["ci_low"], inside["ci_high"]) == pytest.approx((0.3, 0.3))
    outside = tost(np.array([1.0, 1.0]), np.array([1.5, 1.5]), margin=0.5)
    assert (outside["p_value"], outside["equivalent"]) == (1.0, False)


def test_too_few_units_are_refused_with_both_counts():
    with pytest.raises(ValueError, match="at least two units per group; got 1 and 3"):
        permutation_test(np.ones(1), np.ones(3), 9, seed=0)
    with pytest.raises(ValueError, match="at least two units per group; got 3 and 1"):
        permutation_test(np.ones(3), np.ones(1), 9, seed=0)
    with pytest.raises(ValueError, match="at least two values per group; got 2 and 1"):
        tost(np.ones(2), np.ones(1), margin=1.0)
    with pytest.raises(ValueError, match="at least two values per group; got 1 and 2"):
        tost(np.ones(1), np.ones(2), margin=1.0)
    with pytest.raises(ValueError, match="margin must be > 0; got -1"):
        tost(np.ones(2), np.ones(2), margin=-1)


def test_permutation_p_value_of_unequal_groups_by_enumeration():
    # x = [0, 0], y = [1, 1, 1]: only the observed split reaches |difference| = 1 (C(5, 2) = 10 splits).
    result = permutation_test(np.zeros(2), np.ones(3), 4999, seed=3)
    assert result["difference"] == 1.0
    assert result["p_value"] == pytest.approx(1 / 10, abs=0.015)
    swapped = permutation_test(np.ones(3), np.zeros(2), 4999, seed=3)  # two units are enough
    assert (swapped["difference"], swapped["p_value"]) == pytest.approx((-1.0, 1 / 10), abs=0.015)


def test_gap_extremes():
    gap = gap_replicates(np.array([[0.6, 0.9, 0.5, 0.7]]))
    np.testing.assert_allclose([gap["s_max"][0], gap["s_min"][0]], [0.9, 0.5])


def test_gap_of_a_grid_of_rows_works_on_the_last_axis():
    layer = np.array([[[0.1, 0.5, 0.3], [0.9, 0.2, 0.4]], [[0.3, 0.3, 0.1], [0.2, 0.6, 0.8]]])  # [2, 2, 3 layers]
    gap = gap_replicates(layer)
    np.testing.assert_allclose(gap["s_max"], [[0.5, 0.9], [0.3, 0.8]])
    np.testing.assert_allclose(gap["s_min"], [[0.1, 0.2], [0.1, 0.2]])
    np.testing.assert_allclose(gap["delta_s"], [[0.4, 0.7], [0.2, 0.6]])
    np.testing.assert_allclose(gap["r_max"], [[2 / 3, 1 / 3], [1 / 3, 1.0]])
    np.testing.assert_allclose(gap["r_min"], [[1 / 3, 2 / 3], [1.0, 1 / 3]])


def test_permutation_test_keeps_trailing_shape_is_seeded_and_counts_exact_ties():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(4, 2, 3)), rng.normal(size=(5, 2, 3))
    first, again = permutation_test(x, y, 99, seed=7), permutation_test(x, y, 99, seed=7)
    assert first["p_value"].shape == first["difference"].shape == (2, 3)
    np.testing.assert_array_equal(first["p_value"], again["p_value"])
    assert permutation_test(np.zeros(3), np.zeros(3), 19, seed=0)["p_value"] == 1.0  # every split ties


def test_float32_inputs_are_tested_in_float64():
    x32 = np.array([0.1, 0.7, 0.35, 0.9], dtype=np.float32)
    y32 = np.array([0.3, 0.65, 0.2, 0.45, 0.8], dtype=np.float32)
    x, y = x32.astype(np.float64), y32.astype(np.float64)  # the same values, exactly
    rtol = reduction_rtol(np.float64, 5)
    permuted = permutation_test(x32, y32, 49, seed=2)
    assert permuted["difference"] == pytest.approx(y.mean() - x.mean(), rel=rtol)
    result = tost(x32, y32, margin=0.3)
    assert result["difference"] == pytest.approx(y.mean() - x.mean(), rel=rtol)
    expected = tost(x, y, margin=0.3)
    for key in ("ci_low", "ci_high", "p_lower", "p_upper"):
        assert result[key] == pytest.approx(expected[key], rel=rtol), key
    lower = stats.ttest_ind(y + 0.3, x, equal_var=False, alternative="greater").pvalue
    assert result["p_lower"] == pytest.approx(lower, rel=reduction_rtol(np.float64, 64))
    # the gap of float32 layers: max - min of the given values in float64 (exact for two float32s)
    gap = gap_replicates(x32)
    assert float(gap["delta_s"]) == float(x32.max()) - float(
        x32.min()
    )  # float(): NumPy compares a float32 with a float in float32


def test_permutation_p_values_do_not_depend_on_a_layers_scale():
    x = np.array([0.50, 0.52, 0.47, 0.51])
    y = np.array([0.58, 0.55, 0.61, 0.49])
    columns = np.array([1.0, 1e-20, 1e20])  # the same layer at three scales, tested together
    result = permutation_test(x[:, None] * columns, y[:, None] * columns, 199, seed=4)
    assert result["p_value"][1] == result["p_value"][0] == result["p_value"][2]
    assert 0.0 < result["p_value"][0] < 0.2


def test_tost_claims_equivalence_only_below_alpha():
    x, y = np.array([10.0, 10.4, 9.7, 10.1]), np.array([10.3, 10.2, 10.6])
    p_value = tost(x, y, margin=0.8)["p_value"]
    assert not tost(x, y, margin=0.8, alpha=p_value)["equivalent"]  # p < alpha, strictly
    assert tost(x, y, margin=0.8, alpha=np.nextafter(p_value, 1.0))["equivalent"]


def test_benjamini_hochberg_by_hand_leaves_nan_out_of_the_family():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.2])
    # four tests: sorted 0.01, 0.03, 0.04, 0.2 -> p * 4 / rank = 0.04, 0.06, 0.0533, 0.2, then the running minimum
    # from the top: 0.04, 0.0533, 0.0533, 0.2
    q = benjamini_hochberg(p)
    np.testing.assert_allclose(q, [0.04, 0.16 / 3, np.nan, 0.16 / 3, 0.2], rtol=1e-12)
    assert np.isnan(benjamini_hochberg(np.array([np.nan, np.nan]))).all()
    np.testing.assert_allclose(benjamini_hochberg(np.array([0.5, 0.9])), [0.9, 0.9])  # q = max over ranks above
    assert benjamini_hochberg(np.array([])).shape == (0,)
