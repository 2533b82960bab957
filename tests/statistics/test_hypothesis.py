"""Permutation test and TOST: known answers, and the permutation p-value's null distribution."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol
from scipy import stats

from headstab.statistics.hypothesis import (
    benjamini_hochberg,
    gap_replicates,
    pair_pseudo_values,
    paired_tost,
    permutation_test,
    sign_flip_test,
    tost,
)


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


def test_pseudo_values_average_to_the_pair_mean_and_leave_one_refit_out_by_hand():
    values = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0], [6.0, 7.0, 0.0]])  # the diagonal is never read
    pseudo = pair_pseudo_values(values + np.diag([9.0, 9.0, 9.0]))
    mean = (1 + 2 + 3 + 5 + 6 + 7) / 6
    without = {0: (5 + 7) / 2, 1: (2 + 6) / 2, 2: (1 + 3) / 2}  # mean over the pairs left without refit s
    np.testing.assert_allclose(
        pseudo, [3 * mean - 2 * without[s] for s in range(3)], atol=reduction_atol(np.float64, 6, 7)
    )
    assert pseudo.mean() == pytest.approx(mean, abs=reduction_atol(np.float64, 6, 7))
    with pytest.raises(ValueError, match="at least 3 refits"):
        pair_pseudo_values(np.ones((2, 2)))


def test_sign_flip_enumerates_every_sign_vector_when_they_are_few():
    out = sign_flip_test(np.array([1.0, 1.0, 1.0]), 999, seed=0)
    assert out["n_signs"] == 8 and out["p_value"] == pytest.approx(2 / 8)  # all +, all -
    out = sign_flip_test(np.array([[1.0, 1.0], [1.0, -1.0], [1.0, 0.0]]), 999, seed=0)
    assert out["p_value"].tolist() == pytest.approx([2 / 8, 1.0])  # trailing axes tested separately
    out = sign_flip_test(np.full(12, 0.5), 999, seed=1)  # 4,096 sign vectors > 999: Monte Carlo
    assert out["n_signs"] == 999 and out["p_value"] == pytest.approx(1 / 1000, abs=2 / 1000)
    with pytest.raises(ValueError, match="at least two paired differences"):
        sign_flip_test(np.array([1.0]), 99, seed=0)


def test_sign_flip_of_pseudo_values_holds_its_level_where_per_anchor_means_do_not():
    """Null model: each refit's agreement = its anchor effect + its partner's effect + noise, both members
    drawn alike, the pairing shared. Per-anchor means share the partners and reject too often."""
    rng = np.random.default_rng(0)
    n, sims, off = 8, 300, ~np.eye(8, dtype=bool)
    rejected = {"anchor": 0, "pseudo": 0}
    for sim in range(sims):
        shared = rng.normal(size=n)
        members = []
        for _ in range(2):
            anchor, partner = 0.5 * shared + rng.normal(size=n), 0.5 * shared + rng.normal(size=n)
            members.append(anchor[:, None] + partner[None, :] + 0.5 * rng.normal(size=(n, n)))
        per_anchor = [np.where(off, m, 0).sum(axis=1) / (n - 1) for m in members]
        pseudo = [pair_pseudo_values(m) for m in members]
        rejected["anchor"] += sign_flip_test(per_anchor[1] - per_anchor[0], 256, sim)["p_value"] < 0.05
        rejected["pseudo"] += sign_flip_test(pseudo[1] - pseudo[0], 256, sim)["p_value"] < 0.05
    assert 0.02 <= rejected["pseudo"] / sims <= 0.09  # binomial 95% range of a 5% test over 300 datasets
    assert rejected["anchor"] / sims > 0.09


def test_paired_tost_is_two_one_sample_t_tests_of_the_differences():
    x = np.array([20.0, 25.0, 18.0, 30.0, 22.0])
    y = x + np.array([0.1, -0.05, 0.08, 0.02, 0.0])
    out = paired_tost(x, y, margin=0.4, alpha=0.05)
    d = y - x
    p_lower = stats.ttest_1samp(d + 0.4, 0.0, alternative="greater").pvalue
    p_upper = stats.ttest_1samp(d - 0.4, 0.0, alternative="less").pvalue
    interval = stats.ttest_1samp(d, 0.0).confidence_interval(0.9)
    rtol = reduction_rtol(np.float64, 16)
    assert out["p_value"] == pytest.approx(max(p_lower, p_upper), rel=rtol) and out["equivalent"]
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((interval.low, interval.high), rel=rtol)
    with pytest.raises(ValueError, match="two equal-length series"):
        paired_tost(x, y[:-1], margin=0.4)


def test_permutation_of_pseudo_values_holds_its_level_where_per_anchor_means_do_not():
    """Two independent members of one population (refits trained elsewhere): each refit's agreement = its
    anchor effect + its partner's effect + noise. Per-anchor means of one member share their partners, so the
    permuted labels split dependent units and reject too often; the refits' pseudo-values are the units."""
    rng = np.random.default_rng(7)
    n, sims, off = 8, 300, ~np.eye(8, dtype=bool)
    rejected = {"anchor": 0, "pseudo": 0}
    for sim in range(sims):
        members = []
        for _ in range(2):
            effect = rng.normal(size=n)
            members.append(effect[:, None] + effect[None, :] + 0.5 * rng.normal(size=(n, n)))
        per_anchor = [np.where(off, m, 0).sum(axis=1) / (n - 1) for m in members]
        pseudo = [pair_pseudo_values(m) for m in members]
        rejected["anchor"] += permutation_test(per_anchor[0], per_anchor[1], 999, sim)["p_value"] < 0.05
        rejected["pseudo"] += permutation_test(pseudo[0], pseudo[1], 999, sim)["p_value"] < 0.05
    assert 0.02 <= rejected["pseudo"] / sims <= 0.09  # binomial 95% range of a 5% test over 300 datasets
    assert rejected["anchor"] / sims > 0.15


def test_sign_flip_enumerates_exactly_when_the_sign_vectors_fit_in_the_permutations():
    d = np.array([0.3, 0.1, 0.5])  # 8 sign vectors: |mean*| >= |mean| for the observed and its negation only
    for n_permutations in (8, 10, 26):  # 2**3 <= n_permutations: every vector once, whatever the budget
        out = sign_flip_test(d, n_permutations, seed=0)
        assert out["n_signs"] == 8 and out["p_value"] == pytest.approx(2 / 8)
    out = sign_flip_test(d, 7, seed=0)  # fewer permutations than vectors: random signs, add-one p
    assert out["n_signs"] == 7
    signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(7, 3))
    extreme = (np.abs(signs @ d / 3) >= abs(d.mean()) - 8 * np.finfo(np.float64).eps * 0.5).sum()
    assert out["p_value"] == pytest.approx((1 + extreme) / 8, rel=1e-15)


def test_sign_flip_monte_carlo_p_is_add_one_and_seeded():
    d = np.linspace(-0.4, 1.0, 12)  # 4,096 sign vectors > 199: random ones
    out = sign_flip_test(d, 199, seed=3)
    signs = np.random.default_rng(3).choice([-1.0, 1.0], size=(199, 12))
    extreme = (np.abs(signs @ d / 12) >= abs(d.mean()) - 8 * np.finfo(np.float64).eps * 1.0).sum()
    assert 0 < extreme < 199  # a p-value inside the range, where the add-one count shows
    assert out["p_value"] == pytest.approx((1 + extreme) / 200, rel=1e-15)
    assert out["difference"] == pytest.approx(d.mean(), rel=1e-15) and out["n_signs"] == 199
    assert sign_flip_test(d, 199, seed=3)["p_value"] == out["p_value"]
    assert sign_flip_test(np.full(12, 0.5), 999, seed=1)["p_value"] == pytest.approx(1 / 1000)  # no flip reaches


def test_sign_flip_of_two_pairs_and_of_zero_differences_and_the_output_shapes():
    out = sign_flip_test(np.array([1.0, 1.0]), 99, seed=0)  # two pairs are enough: 4 vectors, ++ and --
    assert (out["n_signs"], float(out["p_value"])) == (4, 0.5)
    assert out["difference"].shape == out["p_value"].shape == ()  # a 1-D input gives scalars
    assert float(sign_flip_test(np.zeros(3), 99, seed=0)["p_value"]) == 1.0  # every flip ties with 0
    grid = sign_flip_test(np.ones((3, 2, 4)), 99, seed=0)
    assert grid["difference"].shape == grid["p_value"].shape == (2, 4)
    np.testing.assert_array_equal(grid["difference"], np.ones((2, 4)))


def test_sign_flip_p_values_do_not_depend_on_a_columns_scale():
    d = np.array([0.30, -0.05, 0.21, 0.12, 0.18])
    columns = np.array([1.0, 1e-20, 1e20])  # the same differences at three scales, tested together
    out = sign_flip_test(d[:, None] * columns, 99, seed=0)
    assert out["p_value"][0] == out["p_value"][1] == out["p_value"][2] == pytest.approx(4 / 32)
    np.testing.assert_allclose(out["difference"], d.mean() * columns, rtol=1e-15)


def test_a_flip_more_than_eight_ulps_of_the_largest_value_below_the_observed_is_not_a_tie():
    # d = [0.75, b]: the flips +- and -+ give |0.75 - b| / 2, b below the observed (0.75 + b) / 2. The tie slack is
    # 8 eps x 0.75 = 12 ulps of 0.75 (ulp 2**-53); b = 13 ulps is beyond it. Every sum here is exact.
    b = 13 * 2.0**-53
    out = sign_flip_test(np.array([0.75, b]), 99, seed=0)
    assert float(out["p_value"]) == 0.5  # ++ and -- only
    assert float(sign_flip_test(np.array([0.75, 12 * 2.0**-53]), 99, seed=0)["p_value"]) == 1.0  # within: ties
    # the same in the permutation test: x = [0.75, b], y = [0, 0]; the splits {0.75, 0} differ by (0.75 - b) / 2
    result = permutation_test(np.array([0.75, b]), np.zeros(2), 599, seed=0)
    assert result["p_value"] == pytest.approx(1 / 3, abs=0.06)  # 2 of the 6 splits
    tie = permutation_test(np.array([0.75, 12 * 2.0**-53]), np.zeros(2), 599, seed=0)
    assert tie["p_value"] == 1.0


def test_float32_differences_and_pair_values_are_reduced_in_float64():
    d32 = np.array([0.1, 0.7, 0.35, 0.9, 0.2], dtype=np.float32)
    out = sign_flip_test(d32, 99, seed=0)
    assert out["difference"].dtype == np.float64
    assert float(out["difference"]) == d32.astype(np.float64).mean()
    values32 = np.array([[0.0, 0.1, 0.7], [0.3, 0.0, 0.35], [0.9, 0.2, 0.0]], dtype=np.float32)
    pseudo = pair_pseudo_values(values32)
    assert pseudo.dtype == np.float64
    np.testing.assert_array_equal(pseudo, pair_pseudo_values(values32.astype(np.float64)))
    p32 = np.array([0.011, 0.043, 0.029, 0.2], dtype=np.float32)
    q = benjamini_hochberg(p32)
    assert q.dtype == np.float64
    np.testing.assert_array_equal(q, stats.false_discovery_control(p32.astype(np.float64)))
    x32, y32 = np.array([20.1, 24.3, 19.7], np.float32), np.array([20.2, 24.1, 19.9], np.float32)
    for x, y in ((x32, y32), (x32, y32.astype(np.float64)), (x32.astype(np.float64), y32)):
        expected = paired_tost(x32.astype(np.float64), y32.astype(np.float64), margin=0.5)
        assert paired_tost(x, y, margin=0.5) == expected


def test_pseudo_values_keep_trailing_axes_and_refuse_a_non_square_block():
    values = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0], [6.0, 7.0, 0.0]])
    trailing = np.stack([values, 2 * values, values + 1, -values], axis=-1)  # [refit, refit, 4 layers]
    pseudo = pair_pseudo_values(trailing)
    assert pseudo.shape == (3, 4)
    one = pair_pseudo_values(values)
    atol = reduction_atol(np.float64, 6, 8)
    np.testing.assert_allclose(pseudo, np.stack([one, 2 * one, one + 1, -one], axis=-1), atol=atol)
    grid = pair_pseudo_values(np.stack([trailing, trailing], axis=-1))  # [refit, refit, layer, head]
    assert grid.shape == (3, 4, 2)
    with pytest.raises(ValueError, match=r"at least 3 refits; got \(3, 4\)"):
        pair_pseudo_values(np.ones((3, 4)))


def test_paired_tost_defaults_and_refusals():
    x = np.array([20.0, 25.0, 18.0, 30.0, 22.0])
    y = x + np.array([0.1, -0.05, 0.08, 0.02, 0.0])
    default = paired_tost(x, y, margin=0.4)
    assert default["alpha"] == 0.05 and default == paired_tost(x, y, margin=0.4, alpha=0.05)
    two = paired_tost(np.array([1.0, 2.0]), np.array([1.1, 2.3]), margin=1.0)  # two pairs: 1 degree of freedom
    d = np.array([0.1, 0.3])
    se = d.std(ddof=1) / np.sqrt(2)
    assert two["p_lower"] == pytest.approx(stats.t.sf((d.mean() + 1.0) / se, 1), rel=1e-12)
    assert two["ci_high"] == pytest.approx(d.mean() + stats.t.ppf(0.95, 1) * se, rel=1e-12)
    with pytest.raises(ValueError, match="the equivalence margin must be > 0; got 0"):
        paired_tost(x, y, margin=0.0)
    with pytest.raises(ValueError, match=r"two equal-length series of at least two values; got \(3, 2\), \(3, 2\)"):
        paired_tost(np.ones((3, 2)), np.ones((3, 2)), margin=1.0)
    with pytest.raises(ValueError, match=r"got \(1,\), \(1,\)"):
        paired_tost(np.ones(1), np.ones(1), margin=1.0)


def test_inputs_of_any_float_precision_are_tested_in_float64():
    x = np.array([0.1, 0.7, 0.35, 0.9])
    y = np.array([0.3, 0.65, 0.2, 0.45])
    expected = paired_tost(x, y, margin=0.5)
    for pair in ((x.astype(np.longdouble), y), (x, y.astype(np.longdouble)), (x.astype(np.float16), y)):
        assert paired_tost(*pair, margin=0.5) == paired_tost(*(v.astype(np.float64) for v in pair), margin=0.5)
    assert paired_tost(x.astype(np.longdouble), y.astype(np.longdouble), margin=0.5) == expected
    pseudo = pair_pseudo_values(np.random.default_rng(0).random((3, 3, 2)).astype(np.longdouble))
    assert pseudo.dtype == np.float64  # float64 [refit, ...], as documented


def test_a_missing_p_value_given_as_none_is_no_test():
    np.testing.assert_allclose(benjamini_hochberg([0.01, None, 0.04]), [0.02, np.nan, 0.04], rtol=1e-15)
