"""Intervals of correlations and pair means: known answers, commonness against Eq. 10."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.sections.ablation import ablation_correlation_intervals
from headstab.sections.residual_cka import layer_cka_table
from headstab.stability import commonness_table
from headstab.statistics.bootstrap import draw_resamples
from headstab.statistics.resampling import (
    commonness_replicates,
    mean_interval,
    pair_mean_interval,
    partial_correlation,
    pearson_interval,
)


def test_pearson_interval_of_a_line_is_one_and_of_noise_covers_zero():
    x = np.arange(10.0)
    assert pearson_interval(x, 2 * x + 1, 200, 0, 0.95) == pytest.approx((1.0, 1.0))
    rng = np.random.default_rng(0)
    low, high = pearson_interval(rng.normal(size=200), rng.normal(size=200), 500, 1, 0.95)
    assert low < 0 < high and high - low < 0.4
    assert np.isnan(pearson_interval([1.0, 2.0], [3.0, 4.0], 50, 0, 0.95)[0])  # fewer than 3 units


def test_mean_interval_brackets_the_mean_and_ignores_nan():
    low, high = mean_interval(np.array([0.1, 0.2, 0.3, np.nan, 0.4]), 500, 0, 0.95)
    assert 0.1 <= low < 0.25 < high <= 0.4


def test_pair_mean_interval_is_zero_width_for_equal_pairs_and_needs_every_pair():
    pairs = [(1, 2), (1, 3), (2, 3)]
    table = pd.DataFrame(
        [(a, b, layer, 0.7) for a, b in pairs for layer in (0, 1)], columns=["seed_a", "seed_b", "layer", "cka"]
    )
    out = pair_mean_interval(table, "cka", 100, 0, 0.95)
    np.testing.assert_allclose(out[["ci_low", "ci_high"]], 0.7, atol=reduction_atol(np.float64, 9))
    with pytest.raises(ValueError, match="not every pair"):
        pair_mean_interval(table.iloc[1:], "cka", 10, 0, 0.95)


def test_ordered_with_self_interval_is_the_affine_map_of_the_distinct_one():
    rng = np.random.default_rng(0)
    pairs = [(a, b) for a in range(1, 5) for b in range(a + 1, 5)]
    table = pd.DataFrame(
        [("p", a, b, 0, rng.random()) for a, b in pairs], columns=["promptset", "seed_a", "seed_b", "layer", "cka"]
    )
    distinct = layer_cka_table(table, "distinct", 200, 0, 0.9)
    ordered = layer_cka_table(table, "ordered_with_self", 200, 0, 0.9)
    np.testing.assert_allclose(ordered["ci_low"], 0.75 * distinct["ci_low"] + 0.25)
    np.testing.assert_allclose(ordered["cka_mean"], 0.75 * distinct["cka_mean"] + 0.25)


def test_commonness_replicates_with_every_group_once_equal_eq_10():
    rng = np.random.default_rng(0)
    grouped = rng.random((3, 2, 2, 2, 3, 3)).astype(np.float32)
    sizes = np.array([2, 1, 3])
    replicates = commonness_replicates(grouped, sizes, np.ones((1, 3), dtype=int))
    mean = np.tensordot(sizes / sizes.sum(), grouped.astype(np.float64), axes=1)
    expected = commonness_table(mean, [1, 2], "p")["commonness"].to_numpy().reshape(2, 2, 3)
    np.testing.assert_allclose(replicates[0], expected, atol=reduction_atol(np.float64, 9))


def test_ablation_interval_per_layer():
    table = pd.DataFrame(
        {
            "layer": [0] * 6 + [1] * 6,
            "stability": np.tile(np.arange(6.0), 2),
            "delta_ppl": np.r_[np.arange(6.0), -np.arange(6.0)],
        }
    )
    out = ablation_correlation_intervals(table, 100, 0, 0.95).set_index("layer")
    assert out.loc[0, "ci_low"] == pytest.approx(1.0) and out.loc[1, "ci_high"] == pytest.approx(-1.0)


def resampled_rows(seed, n_boot, n_units):
    """The resamples the module documents: one seeded generator, units drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n_units, size=(n_boot, n_units))


def nan_quantiles(values, confidence):
    alpha = (1 - confidence) / 2
    return np.nanquantile(values, alpha), np.nanquantile(values, 1 - alpha)


def test_pearson_interval_is_the_quantiles_of_r_over_resampled_finite_units():
    rng = np.random.default_rng(1)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    x[3], y[7] = np.nan, np.inf  # units 3 and 7 are dropped
    keep = np.isfinite(x) & np.isfinite(y)
    rows = resampled_rows(4, 200, keep.sum())
    r = [np.corrcoef(x[keep][row], y[keep][row])[0, 1] for row in rows]
    low, high = pearson_interval(x, y, 200, 4, 0.9)
    assert (low, high) == pytest.approx(nan_quantiles(r, 0.9), rel=reduction_rtol(np.float64, 10))
    assert low < high


def test_pearson_interval_skips_constant_resamples_and_is_nan_when_every_one_is_constant():
    x, y = np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 3.0])
    rows = resampled_rows(2, 60, 3)
    constant = np.ptp(rows, axis=1) == 0
    assert constant.any()  # some resamples draw one unit thrice: r undefined there
    with np.errstate(invalid="ignore", divide="ignore"):
        r = [np.nan if flat else np.corrcoef(x[row], y[row])[0, 1] for row, flat in zip(rows, constant)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # constant resamples are skipped, not divided by zero
        interval = pearson_interval(x, y, 60, 2, 0.8)
    assert interval == pytest.approx(nan_quantiles(r, 0.8), rel=reduction_rtol(np.float64, 3))
    assert np.isnan(pearson_interval(np.ones(5), np.arange(5.0), 20, 0, 0.9)).all()


def test_mean_interval_is_the_quantiles_of_resampled_means_of_the_finite_values():
    values = np.array([0.1, np.nan, 0.7, 0.2, np.inf, 0.4])
    finite = values[np.isfinite(values)]
    means = finite[resampled_rows(5, 300, finite.size)].mean(axis=1)
    expected = nan_quantiles(means, 0.9)
    assert mean_interval(values, 300, 5, 0.9) == pytest.approx(expected, rel=reduction_rtol(np.float64, 4))
    assert np.isnan(mean_interval(np.array([0.3, np.nan]), 10, 0, 0.9)).all()  # one finite value
    assert mean_interval(np.array([0.3, 0.5]), 50, 0, 0.9)[1] <= 0.5


def test_pair_mean_interval_weighs_each_pair_by_the_resampled_refit_counts():
    # five refits (means of many distinct values), seeds out of order, pairs either way round, layers out of order
    seeds = [11, 3, 7, 5, 9]
    rng = np.random.default_rng(3)
    values = {(a, b): rng.random() for i, a in enumerate(seeds) for b in seeds[i + 1 :]}
    table = pd.DataFrame(
        [(a, b, layer, v + layer) for (a, b), v in values.items() for layer in (3, 1)],
        columns=["seed_a", "seed_b", "layer", "cka"],
    )
    out = pair_mean_interval(table, "cka", 60, 6, 0.8)
    assert list(out["layer"]) == [1, 3] and (out["n_boot"] == 60).all()
    counts = draw_resamples(60, 5, 1, 6).refit_counts  # refits in sorted seed order
    index = {seed: i for i, seed in enumerate(sorted(seeds))}
    means = []
    for k in counts:
        weights = {pair: k[index[pair[0]]] * k[index[pair[1]]] for pair in values}
        means.append(sum(w * values[pair] for pair, w in weights.items()) / sum(weights.values()))
    for layer, row in out.set_index("layer").iterrows():
        expected = nan_quantiles(np.array(means) + layer, 0.8)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(expected, rel=reduction_rtol(np.float64, 25))
    with pytest.raises(ValueError, match=r"layer 3: not every pair of the refits \[3, 5, 7, 9, 11\] has a cka"):
        pair_mean_interval(table.iloc[1:], "cka", 10, 0, 0.95)


def test_float32_inputs_are_resampled_in_float64():
    rng = np.random.default_rng(4)
    x32, y32 = rng.random(9).astype(np.float32), rng.random(9).astype(np.float32)
    x, y = x32.astype(np.float64), y32.astype(np.float64)  # the same values
    rtol = reduction_rtol(np.float64, 9)
    for a, b in ((x32, y), (x, y32)):
        assert pearson_interval(a, b, 50, 1, 0.9) == pytest.approx(pearson_interval(x, y, 50, 1, 0.9), rel=rtol)
    assert mean_interval(x32, 50, 1, 0.9) == pytest.approx(mean_interval(x, 50, 1, 0.9), rel=rtol)
    grouped = rng.random((2, 2, 2, 1, 3, 3)).astype(np.float32)
    counts = np.array([[1, 1], [2, 0]])
    np.testing.assert_allclose(
        commonness_replicates(grouped, [1, 2], counts),
        commonness_replicates(grouped.astype(np.float64), [1, 2], counts),
        rtol=reduction_rtol(np.float64, 6),
    )


def test_commonness_replicates_weigh_groups_by_count_and_size():
    rng = np.random.default_rng(2)
    grouped = rng.random((3, 2, 2, 1, 2, 2))
    sizes, counts = np.array([1, 2, 3]), np.array([[2, 0, 1], [0, 3, 0]])
    replicates = commonness_replicates(grouped, sizes, counts)
    for r, count in enumerate(counts):
        weights = count * sizes / (count * sizes).sum()
        mixed = np.tensordot(weights, grouped, axes=1)  # [a, b, layer, head_a, head_b]
        for seed in range(2):
            expected = mixed[seed, seed].mean(axis=-1)  # mean over the refit's own heads, itself included
            np.testing.assert_allclose(replicates[r, seed], expected, atol=reduction_atol(np.float64, 6))


def _residual(v, z):
    """v minus its least-squares line on z."""
    return v - np.polyval(np.polyfit(z, v, 1), z)


def test_partial_correlation_is_the_correlation_of_the_residuals_on_z():
    rng = np.random.default_rng(6)
    z = rng.normal(size=40)
    x, y = z + rng.normal(size=40), -z + 0.5 * rng.normal(size=40)
    got = partial_correlation(x, y, z)
    assert got.shape == () and got.dtype == np.float64
    expected = np.corrcoef(_residual(x, z), _residual(y, z))[0, 1]
    assert float(got) == pytest.approx(expected, abs=reduction_atol(np.float64, 40) * 10)
    assert np.corrcoef(x, y)[0, 1] < -0.3 and abs(expected) < 0.3  # z carries the raw correlation
    # the formula itself: (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2))
    r = np.corrcoef([x, y, z])
    by_hand = (r[0, 1] - r[0, 2] * r[1, 2]) / np.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    assert float(got) == pytest.approx(by_hand, rel=reduction_rtol(np.float64, 40))


def test_partial_correlation_weights_are_unit_counts_per_resample():
    rng = np.random.default_rng(7)
    x, y, z = rng.normal(size=(3, 6))
    counts = np.array([[2, 1, 0, 1, 1, 1], [0, 0, 3, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    got = partial_correlation(x, y, z, counts)
    assert got.shape == (3,)
    for r, count in enumerate(counts):
        rows = np.repeat(np.arange(6), count)
        assert got[r] == pytest.approx(float(partial_correlation(x[rows], y[rows], z[rows])), rel=1e-12)
    # counts are weights: scaling a resample's counts changes nothing; one resample as a vector is [1]
    np.testing.assert_allclose(partial_correlation(x, y, z, 3 * counts), got, rtol=1e-12)
    assert partial_correlation(x, y, z, counts[2]).shape == (1,)
    assert partial_correlation(x, y, z, counts[2])[0] == pytest.approx(float(partial_correlation(x, y, z)))


def test_partial_correlation_is_nan_where_z_leaves_nothing_and_never_beyond_one():
    z = np.arange(8.0)
    y = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 7.0, 6.0, 8.0])
    assert np.isnan(partial_correlation(2 * z + 1, y, z))  # x is a line in z: nothing left of x
    assert np.isnan(partial_correlation(y, 3 - z, z))  # nor of y
    assert np.isnan(partial_correlation(np.ones(8), y, z))  # a constant has no correlation
    # |r_xz| = 1 up to the rounding of sums over 8 units: still nothing left
    assert np.isnan(partial_correlation(z + 1e-13 * np.sin(z), y, z))
    w = np.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0])  # orthogonal to z and to a constant
    same = partial_correlation(y + w, y + w, z)
    assert float(same) == 1.0  # clipped: rounding may leave it a hair above 1
    weighted = partial_correlation(2 * z + 1, y, z, np.ones((2, 8)))
    assert np.isnan(weighted).all() and weighted.shape == (2,)


def test_partial_correlation_of_a_constant_whose_mean_does_not_round_exactly_is_nan():
    """0.37 repeated: its weighted mean misses 0.37 by rounding, so its spread is about 1e-17, not 0; read as
    a spread, y's residual correlates with anything at about 0 and a table would print that r with an interval."""
    rng = np.random.default_rng(5)
    x, z, y = rng.normal(size=20), rng.normal(size=20), np.full(20, 0.37)
    counts = rng.multinomial(20, np.full(20, 1 / 20), size=6).astype(np.float64)
    assert np.isnan(partial_correlation(x, y, z))
    assert np.isnan(partial_correlation(y, x, z, counts)).all()
    assert np.isnan(partial_correlation(x, z, y)).all()
    # a real spread of a billionth of the value is kept: 1e-9 is far above 16 n eps = 7e-14
    varying = 0.37 * (1 + 1e-9 * rng.normal(size=20))
    assert np.isfinite(partial_correlation(x, varying, z))
    assert np.isfinite(partial_correlation(x, varying, z, counts)).all()


def test_partial_correlation_reads_constancy_per_resample_and_per_variable_scale():
    rng = np.random.default_rng(8)
    x, z = rng.normal(size=20), rng.normal(size=20)
    y = np.where(np.arange(20) < 10, 0.37, 1.0 + rng.normal(size=20))
    counts = np.zeros((2, 20))
    counts[0, :10] = 2.0  # resample 0 draws only units where y is 0.37: constant there, and there only
    counts[1] = 1.0
    partial = partial_correlation(x, y, z, counts)
    assert np.isnan(partial[0]) and np.isfinite(partial[1])
    # each variable's rounding floor scales with its own size: z at 1e12 leaves y's real spread of 1e-9 alone
    varying = 0.37 * (1 + 1e-9 * rng.normal(size=20))
    assert np.isfinite(partial_correlation(x, varying, 1e12 * z))


def test_partial_correlation_of_rounding_past_one_is_clipped_to_exactly_one():
    z = np.arange(8.0)
    v = np.sin(10 * z)  # with these units the unclipped formula gives 1 + 2.2e-16 and -(1 + 2.2e-16)
    assert float(partial_correlation(v, v, z)) == 1.0
    assert float(partial_correlation(v, -v, z)) == -1.0


def test_partial_correlation_degenerate_threshold_is_16_n_eps_of_the_left_factor():
    # x = z + c w, y = z / 2 + w + u with w, u orthogonal to z, to a constant and to each other, all of
    # population variance 1: the residuals are c w and w + u, so the partial correlation is 1 / sqrt(2),
    # and left = (1 - r_xz^2)(1 - r_yz^2) = c^2 / (var z + c^2) * 2 / (var z / 4 + 2) with var z = 5.25.
    n, eps = 8, np.finfo(np.float64).eps
    z = np.arange(8.0)
    w = np.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0])
    u = np.array([1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0])
    y = z / 2 + w + u

    def x_with_left(ratio: float) -> np.ndarray:  # left = ratio * 16 n eps
        return z + np.sqrt(ratio * 16 * n * eps * 5.25 / (2 / (5.25 / 4 + 2))) * w

    assert np.isnan(partial_correlation(x_with_left(0.92), y, z))
    # 1 - r_xz^2 ~ 4e-14 is known to ~eps / 4e-14 ~ 1e-2 relative once r_xz is rounded
    assert float(partial_correlation(x_with_left(1.03), y, z)) == pytest.approx(1 / np.sqrt(2), rel=1e-2)
    assert float(partial_correlation(x_with_left(1e6), y, z)) == pytest.approx(1 / np.sqrt(2), rel=1e-8)


def test_partial_correlation_nan_cases_raise_no_floating_point_warnings():
    z = np.arange(8.0)
    y = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 7.0, 6.0, 8.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(partial_correlation(np.ones(8), y, z))  # 0 / 0: a constant
        assert np.isnan(partial_correlation(z + 1e-13 * np.sin(z), y, z))  # a nonzero over sqrt(0)


@pytest.mark.parametrize("dtype", [np.float32, np.longdouble, np.int64])
def test_partial_correlation_reads_every_input_dtype_in_float64(dtype):
    rng = np.random.default_rng(8)
    x, y, z = rng.integers(-50, 50, size=(3, 12))
    counts = rng.integers(0, 3, size=(4, 12))
    expected = partial_correlation(x.astype(np.float64), y.astype(np.float64), z.astype(np.float64), counts)
    got = partial_correlation(x.astype(dtype), y.astype(dtype), z.astype(dtype), counts.astype(dtype))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)
    one = partial_correlation(x.astype(dtype), y.astype(dtype), z.astype(dtype))
    assert one.dtype == np.float64 and float(one) == float(partial_correlation(x * 1.0, y * 1.0, z * 1.0))
