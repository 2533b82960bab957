"""headstab.statistics.layer_tests: the layer tests with refits as units, by hand, planted and under the null."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from headstab.statistics.layer_tests import (
    depth_trend_test,
    layer_heterogeneity_test,
    mid_depth_test,
    q_values,
    sign_vectors,
)


def test_sign_vectors_enumerate_every_vector_once_identity_first_when_few():
    signs, exact = sign_vectors(3, 8, seed=0)
    assert exact and signs.shape == (8, 3) and (signs[0] == 1).all()
    assert {tuple(row) for row in signs} == set(itertools.product([-1.0, 1.0], repeat=3))
    drawn, exact = sign_vectors(4, 15, seed=1)
    assert not exact and drawn.shape == (16, 4) and set(np.unique(drawn[1:])) == {-1.0, 1.0}
    assert (drawn[0] == 1).all()  # the observed signs, then 15 random vectors
    np.testing.assert_array_equal(drawn, sign_vectors(4, 15, seed=1)[0])
    assert not np.array_equal(drawn, sign_vectors(4, 15, seed=2)[0])
    assert sign_vectors(4, 16, seed=1)[1]  # 2**4 = 16 vectors: enumerated


def test_sign_vectors_name_what_is_wrong():
    with pytest.raises(ValueError, match="at least two refits; got 1"):
        sign_vectors(1, 100, 0)
    with pytest.raises(ValueError, match="'statistics.permutations' must be >= 1; got 0"):
        sign_vectors(3, 0, 0)


def test_heterogeneity_by_hand_three_refits_two_layers():
    # centred vectors [1, -1], [0, 0], [0.5, -0.5]: a flipped range is |2 e1 + e3| / 3, 1 or 1/3 in 4 of 8 each
    result = layer_heterogeneity_test(np.array([[2.0, 0.0], [0.0, 0.0], [1.0, 0.0]]), 1000, seed=0)
    assert result["delta_s"] == pytest.approx(1.0)
    assert result["p_value"] == pytest.approx(4 / 8) and result["chance"] == pytest.approx((4 + 4 / 3) / 8)
    assert result["min_p"] == pytest.approx(2 / 8) and result["n_signs"] == 8
    same = layer_heterogeneity_test(np.array([[1.0, 0.0]] * 3), 1000, seed=0)
    # every refit alike: only the identity and its negation reach the observed range
    assert same["p_value"] == pytest.approx(2 / 8) == same["min_p"] and same["chance"] == pytest.approx(0.5)


def test_heterogeneity_ignores_each_refits_own_offset_and_the_order_of_the_layers():
    rng = np.random.default_rng(3)
    psi = rng.normal(size=(6, 5)) + np.array([0.0, 0.3, 0.1, 0.0, 0.2])
    result = layer_heterogeneity_test(psi, 1000, seed=0)
    shifted = layer_heterogeneity_test(psi + rng.normal(size=(6, 1)) * 10, 1000, seed=0)
    reordered = layer_heterogeneity_test(psi[:, [4, 2, 0, 1, 3]], 1000, seed=0)
    for other in (shifted, reordered):
        assert other["p_value"] == result["p_value"]
        assert other["chance"] == pytest.approx(result["chance"], rel=1e-12)
    assert reordered["delta_s"] == pytest.approx(result["delta_s"], rel=1e-12)


def test_heterogeneity_finds_a_planted_layer_and_stays_at_its_level_without_one():
    rng = np.random.default_rng(4)
    planted = rng.normal(scale=0.02, size=(12, 4)) + np.array([0.0, 0.0, 0.1, 0.0])
    assert layer_heterogeneity_test(planted, 5000, seed=0)["p_value"] < 0.001
    # no layer differs, the spreads of the layers do (0.01 to 0.3): rejections at about 5% of 200 datasets
    spreads = np.array([0.01, 0.3, 0.05, 0.1])
    p = [layer_heterogeneity_test(rng.normal(size=(12, 4)) * spreads, 999, seed=k)["p_value"] for k in range(200)]
    assert np.mean(np.array(p) <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 200)


def test_heterogeneity_counts_random_sign_vectors_with_the_add_one_rule():
    psi = np.column_stack([np.linspace(1.0, 2.0, 14), np.zeros(14)])  # 2**14 > 100: 100 random vectors
    result = layer_heterogeneity_test(psi, 100, seed=0)
    assert result["n_signs"] == 100 and result["min_p"] == pytest.approx(1 / 101)
    assert result["p_value"] == pytest.approx(1 / 101)  # no random flip reaches the all-positive range


def test_mid_depth_by_hand_one_sided_over_every_sign_vector():
    psi = np.array([[1.0, 0.0, 1.0], [2.0, 0.0, 2.0], [0.5, 0.0, 0.5]])  # dips 1, 2 and 0.5
    result = mid_depth_test(psi, 1000, seed=0)
    assert result["dip"] == pytest.approx(3.5 / 3) and result["p_value"] == pytest.approx(1 / 8)
    assert result["min_p"] == pytest.approx(1 / 8) and result["n_signs"] == 8 and result["note"] == ""
    # dips 1, -2, 0.5: flipped sums -0.5 (observed), -1.5, 3.5, 2.5, -2.5, -3.5, 1.5, 0.5: 5 of 8 at least -0.5
    mixed = mid_depth_test(psi * np.array([[1.0], [-1.0], [1.0]]), 1000, seed=0)
    assert mixed["dip"] == pytest.approx(-0.5 / 3) and mixed["p_value"] == pytest.approx(5 / 8)


def test_mid_depth_is_one_sided_a_planted_peak_is_no_dip():
    rng = np.random.default_rng(5)
    profile = np.array([0.0, 0.1, 0.1, 0.0])
    dip = mid_depth_test(rng.normal(scale=0.02, size=(12, 4)) - profile, 5000, seed=0)
    peak = mid_depth_test(rng.normal(scale=0.02, size=(12, 4)) + profile, 5000, seed=0)
    assert dip["dip"] > 0.05 and dip["p_value"] < 0.001
    assert peak["dip"] < -0.05 and peak["p_value"] > 0.99


def test_mid_depth_averages_the_interior_and_the_two_ends():
    psi = np.array([[3.0, 0.0, 2.0, 1.0], [1.0, 1.0, 1.0, 5.0], [2.0, 4.0, 0.0, 2.0]])
    dips = np.array([(3 + 1) / 2 - (0 + 2) / 2, (1 + 5) / 2 - 1.0, (2 + 2) / 2 - 2.0])  # 1, 2, 0
    assert mid_depth_test(psi, 1000, seed=0)["dip"] == pytest.approx(dips.mean())
    # flipped sums e1 + 2 e2 reach the observed 3 for both signs of the third refit's 0: p = 2 / 8
    assert mid_depth_test(psi, 1000, seed=0)["p_value"] == pytest.approx(2 / 8)
    assert mid_depth_test(psi + 7.0, 1000, seed=0)["p_value"] == mid_depth_test(psi, 1000, seed=0)["p_value"]


def test_mid_depth_needs_three_layers_and_says_so():
    result = mid_depth_test(np.ones((5, 2)), 1000, seed=0)
    assert np.isnan(result["dip"]) and np.isnan(result["p_value"]) and result["n_signs"] == 0
    assert np.isnan(result["min_p"])
    assert result["note"] == "needs at least 3 layers (two ends and an interior); this architecture has 2"


def test_pseudo_values_must_be_a_finite_refit_by_layer_array():
    with pytest.raises(ValueError, match=r"finite \[refit, layer\] array; got shape \(4,\)"):
        layer_heterogeneity_test(np.ones(4), 100, 0)
    with pytest.raises(ValueError, match=r"got shape \(3, 3\)"):
        mid_depth_test(np.array([[1.0, np.nan, 0.0]] * 3), 100, 0)


def test_depth_trend_by_hand_every_order_of_three_architectures():
    result = depth_trend_test(np.array([2, 4, 8]), np.array([0.1, 0.2, 0.3]), 1000, seed=0, alternative="greater")
    assert result["rho"] == pytest.approx(1.0) and result["n_orders"] == 6 and result["n_units"] == 3
    assert result["p_value"] == pytest.approx(1 / 6)  # only the observed order reaches rho = 1
    two_sided = depth_trend_test(np.array([2, 4, 8]), np.array([0.1, 0.2, 0.3]), 1000, 0, alternative="two-sided")
    assert two_sided["p_value"] == pytest.approx(2 / 6)  # rho = -1 is as extreme
    falling = depth_trend_test(np.array([2, 4, 8]), np.array([0.3, 0.2, 0.1]), 1000, seed=0, alternative="greater")
    assert falling["rho"] == pytest.approx(-1.0) and falling["p_value"] == pytest.approx(1.0)


def test_depth_trend_uses_average_ranks_drops_missing_values_and_needs_two_depths():
    depth = np.array([4, 4, 8, 8, 12, 3])
    values = np.array([0.0, 0.1, 0.2, 0.15, 0.4, np.nan])
    result = depth_trend_test(depth, values, 1000, seed=0, alternative="greater")
    assert result["rho"] == pytest.approx(stats.spearmanr(depth[:5], values[:5]).statistic)
    assert result["n_units"] == 5 and result["n_orders"] == 120
    assert np.isnan(
        depth_trend_test(np.array([4, 4, 4]), np.array([0.1, 0.2, 0.3]), 100, 0, alternative="greater")["p_value"]
    )
    assert np.isnan(depth_trend_test(np.array([2, 4, 8]), np.full(3, 0.2), 100, 0, alternative="greater")["rho"])
    with pytest.raises(ValueError, match="alternative must be 'greater' or 'two-sided'; got 'less'"):
        depth_trend_test(depth, values, 100, 0, alternative="less")


def test_depth_trend_draws_random_orders_for_many_architectures():
    rng = np.random.default_rng(6)
    depth = np.repeat([2, 4, 8, 12], 3)
    planted = depth_trend_test(
        depth, depth * 0.01 + rng.normal(scale=0.005, size=12), 999, seed=0, alternative="greater"
    )
    assert planted["n_orders"] == 999 and planted["p_value"] == pytest.approx(1 / 1000)
    p = [
        depth_trend_test(depth, rng.normal(size=12), 199, seed=k, alternative="greater")["p_value"] for k in range(200)
    ]
    assert np.mean(np.array(p) <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 200)


def test_q_values_are_benjamini_hochberg_over_the_finite_p_values():
    q = q_values(np.array([0.01, np.nan, 0.04, 0.03]))
    np.testing.assert_allclose(q, [0.03, np.nan, 0.04, 0.04])
    np.testing.assert_allclose(q_values(np.array([0.01, None, 0.04, 0.03], dtype=object)), q)  # a table's column
    assert np.isnan(q_values(np.array([np.nan, np.nan]))).all()


def test_the_smallest_cases_two_refits_one_sign_vector_and_orders_exactly_at_the_budget():
    signs, exact = sign_vectors(2, 4, seed=0)
    assert exact and len(signs) == 4
    one, exact = sign_vectors(5, 1, seed=0)
    assert not exact and one.shape == (2, 5)
    exact_orders = depth_trend_test(np.array([2, 4, 8]), np.array([0.1, 0.2, 0.3]), 6, seed=0, alternative="greater")
    assert exact_orders["n_orders"] == 6 and exact_orders["p_value"] == pytest.approx(1 / 6)  # 3! = 6: enumerated
    random_orders = depth_trend_test(np.array([2, 4, 8]), np.array([0.1, 0.2, 0.3]), 5, seed=0, alternative="greater")
    assert random_orders["n_orders"] == 5 and random_orders["p_value"] >= 1 / 6  # (1 + #) / (1 + 5)


def test_mid_depth_counts_random_sign_vectors_with_the_add_one_rule():
    psi = np.column_stack([np.ones(14), np.zeros(14), np.ones(14)]) * np.linspace(1.0, 2.0, 14)[:, None]
    result = mid_depth_test(psi, 100, seed=0)
    assert result["n_signs"] == 100 and result["min_p"] == pytest.approx(1 / 101)
    assert result["p_value"] == pytest.approx(1 / 101)  # every dip positive: no random flip reaches their mean


def test_a_constant_or_single_depth_trend_is_nan_with_no_orders():
    result = depth_trend_test(np.array([4, 4, 4]), np.array([0.1, 0.2, 0.3]), 100, 0, alternative="greater")
    assert np.isnan(result["rho"]) and result["n_orders"] == 0 and result["n_units"] == 3
    result = depth_trend_test(np.array([2, 4, 8, 12]), np.array([0.2, 0.2, 0.2, np.nan]), 100, 0, alternative="greater")
    assert np.isnan(result["p_value"]) and result["n_units"] == 3


def test_random_sign_vectors_and_orders_repeat_with_the_seed_only():
    rng = np.random.default_rng(10)
    psi = rng.normal(size=(16, 4)) + np.array([0.0, 0.2, 0.2, 0.0])
    depth, values = np.repeat([3, 4, 6, 8, 12], 2), rng.normal(size=10)
    for test in (
        lambda seed: layer_heterogeneity_test(psi, 300, seed)["p_value"],
        lambda seed: mid_depth_test(psi, 300, seed)["p_value"],
        lambda seed: depth_trend_test(depth, values, 300, seed, alternative="greater")["p_value"],
    ):
        assert test(0) == test(0) and len({test(seed) for seed in range(5)}) > 1


def test_two_distinct_depths_are_enough_for_a_trend():
    result = depth_trend_test(
        np.array([2, 2, 4, 4]), np.array([0.1, 0.2, 0.3, 0.4]), 1000, seed=0, alternative="greater"
    )
    assert result["rho"] == pytest.approx(stats.spearmanr([2, 2, 4, 4], [0.1, 0.2, 0.3, 0.4]).statistic)
    assert result["n_orders"] == 24 and result["p_value"] == pytest.approx(4 / 24)  # the two 2s and two 4s swapped


def test_float32_pseudo_values_are_computed_in_float64():
    psi = 1000.0 + np.array([[0.0, 1e-3, 0.0], [1e-3, 0.0, 2e-3], [0.0, 0.0, 1e-3]] * 4, dtype=np.float32)
    exact = psi.astype(np.float64)
    assert layer_heterogeneity_test(psi, 100, 0)["delta_s"] == layer_heterogeneity_test(exact, 100, 0)["delta_s"]
    assert mid_depth_test(psi, 100, 0)["dip"] == mid_depth_test(exact, 100, 0)["dip"]


def test_random_orders_are_permutations_so_only_the_observed_order_reaches_rho_one():
    # 10! orders: 9,999 random ones hold the identity with probability 0.003; a draw that repeated units would
    # beat rho = 1 about once in 1,500
    result = depth_trend_test(np.arange(10), np.arange(10) * 0.1, 9999, seed=0, alternative="greater")
    assert result["rho"] == pytest.approx(1.0) and result["p_value"] == pytest.approx(1 / 10000)


def test_the_chance_level_is_the_mean_range_over_the_random_flips_alone():
    psi = np.random.default_rng(11).normal(size=(14, 3))
    result = layer_heterogeneity_test(psi, 50, seed=3)
    signs, exact = sign_vectors(14, 50, seed=3)
    assert not exact and result["n_signs"] == 50
    assert result["chance"] == pytest.approx(np.ptp(signs[1:] @ psi / 14, axis=1).mean(), rel=1e-12)
    assert result["delta_s"] == pytest.approx(np.ptp(psi.mean(axis=0)), rel=1e-12)
