"""headstab.statistics.refit_weights: row weights from refit draws, weighted means and correlations, and the
refit-resampled interval (also exercised through the effective rank, layer robustness and seed grid tests)."""

import re

import numpy as np
import pytest
from helpers.tolerances import reduction_atol

from headstab.statistics.bootstrap import draw_resamples
from headstab.statistics.refit_weights import refit_interval, row_weights, weighted_mean, weighted_pearson


def test_row_refits_of_another_shape_are_refused_naming_it():
    counts = np.array([[1, 2, 0]])
    for rows in (np.zeros((2, 3), int), np.zeros((2, 2, 2), int)):
        with pytest.raises(
            ValueError,
            match=r"^row_refits must be \[row\] or \[row, 2\]; got shape " + re.escape(f"{rows.shape}") + "$",
        ):
            row_weights(counts, rows)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # an empty resample is NaN, not a warning in the rule's log
def test_weighted_mean_of_one_weighted_row_and_of_none():
    values = np.array([2.0, 5.0, 7.0])
    means = weighted_mean(values, np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.25, 0.25, 0.5]]))
    assert means[0] == 2.0 and np.isnan(means[1])
    assert means[2] == pytest.approx(5.25, abs=reduction_atol(np.float64, 3, magnitude=7.0))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_weighted_pearson_with_fractional_zero_and_no_weights():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=6), rng.normal(size=6)
    r = weighted_pearson(x, y, np.array([[1 / 6] * 6, [0.0] * 6]))
    assert r[0] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=reduction_atol(np.float64, 6, magnitude=4.0))
    assert np.isnan(r[1])
    assert np.isnan(weighted_pearson(np.zeros(0), np.zeros(0), np.zeros((1, 0)))).all()


def test_weighted_pearson_floor_is_relative_to_the_values():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=8), rng.normal(size=8)
    expected = np.corrcoef(x, y)[0, 1]
    ones = np.ones((1, 8))
    # tiny variables keep their correlation: the floor scales with them
    tiny = weighted_pearson(1e-13 * x, 1e-13 * y, ones)[0]
    assert tiny == pytest.approx(expected, abs=reduction_atol(np.float64, 8, magnitude=4.0))
    # a variable that varies at rounding level of its size has no correlation
    assert np.isnan(weighted_pearson(1e6 + 1e-9 * x, y, ones)[0])


def _interval_by_hand(x, refits, n_refits, n_boot, seed, confidence):
    """The mean's percentile interval over the refit draws, each row weighing its refit's count."""
    replicates = []
    for k in draw_resamples(n_boot, n_refits, 1, seed).refit_counts:
        w = np.array([k[refit] for refit in refits], dtype=float)
        replicates.append(np.sum(w * x) / w.sum() if w.sum() > 0 else np.nan)
    alpha = (1 - confidence) / 2
    return np.nanquantile(replicates, [alpha, 1 - alpha])


def test_mean_interval_is_the_percentile_of_refit_weighted_means():
    x = np.random.default_rng(2).uniform(0, 1, 12)
    refits = np.arange(12) % 4
    estimate, low, high = refit_interval("mean", x, None, refits, 4, 60, 5, 0.8)
    assert estimate == pytest.approx(x.mean(), abs=reduction_atol(np.float64, 12))
    atol = reduction_atol(np.float64, 12)
    assert [low, high] == pytest.approx(list(_interval_by_hand(x, refits, 4, 60, 5, 0.8)), abs=atol)
    _, wide_low, wide_high = refit_interval("mean", x, None, refits, 4, 60, 5, 0.98)
    assert wide_low < low and high < wide_high
    # two refits are enough to draw
    _, two_low, two_high = refit_interval("mean", x, None, np.arange(12) % 2, 2, 60, 5, 0.8)
    assert [two_low, two_high] == pytest.approx(list(_interval_by_hand(x, np.arange(12) % 2, 2, 60, 5, 0.8)), abs=atol)


def test_rows_with_a_missing_value_are_left_out_of_a_correlation():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=8), rng.normal(size=8)
    y_missing = y.copy()
    y_missing[2] = np.nan
    estimate, _, _ = refit_interval("pearson", x, y_missing, np.arange(8) % 4, 4, 20, 0, 0.9)
    kept = np.arange(8) != 2
    assert estimate == pytest.approx(np.corrcoef(x[kept], y[kept])[0, 1], abs=reduction_atol(np.float64, 7, 4.0))


def test_too_few_rows_or_refits_give_no_interval():
    nan3 = refit_interval("mean", np.array([np.nan, np.inf]), None, np.array([0, 1]), 2, 20, 0, 0.9)
    assert np.isnan(nan3).all()
    assert refit_interval("mean", np.array([0.4]), None, np.array([0]), 3, 20, 0, 0.9)[0] == 0.4
    for x, refits, n_refits in (
        (np.array([0.2, 0.4]), np.array([0, 1]), 4),
        (np.array([0.2, 0.4, 0.6]), np.zeros(3, int), 1),
    ):
        estimate, low, high = refit_interval("mean", x, None, refits, n_refits, 20, 0, 0.9)
        assert estimate == pytest.approx(x.mean(), abs=reduction_atol(np.float64, 3)) and np.isnan([low, high]).all()
    # every draw constant in x: no replicate correlation is defined
    estimate, low, high = refit_interval("pearson", np.ones(4), np.arange(4.0), np.arange(4) % 2, 2, 20, 0, 0.9)
    assert np.isnan([estimate, low, high]).all()


def test_unknown_statistics_and_a_pearson_without_y_are_refused():
    with pytest.raises(ValueError, match=r"^statistic must be 'mean' or 'pearson'; got 'median'$"):
        refit_interval("median", np.ones(3), None, np.arange(3), 3, 10, 0, 0.9)
    with pytest.raises(ValueError, match=r"^a pearson interval needs y$"):
        refit_interval("pearson", np.ones(3), None, np.arange(3), 3, 10, 0, 0.9)


def test_weighted_pearson_of_large_float16_values_is_their_float64_correlation():
    # Both in float16 (the caches' dtype), up to 400 (400 x 400 would overflow float16): r as in float64.
    x = np.array([100.0, 200.0, 300.0, 400.0], dtype=np.float16)
    y = np.array([50.0, 400.0, 100.0, 300.0], dtype=np.float16)
    expected = np.corrcoef(x.astype(np.float64), y.astype(np.float64))[0, 1]
    assert weighted_pearson(x, y, np.ones((1, 4)))[0] == pytest.approx(expected, abs=reduction_atol(np.float64, 4))


def test_a_constant_float16_variable_has_no_correlation_under_any_refit_weights():
    # Weighted means of a constant are off by rounding for some weight rows (the value times a sum of
    # w_i that is not exactly 1): dx is then ~1e-16, and only the variance floor, computed in float64,
    # keeps r from being the correlation of that noise with y.
    x = np.full(7, 7.0, dtype=np.float16)
    y = np.arange(7, dtype=np.float16)
    counts = np.random.default_rng(0).integers(0, 5, size=(200, 7))
    noisy = np.abs((counts / counts.sum(axis=1, keepdims=True)) @ x.astype(np.float64) - 7.0) > 0
    assert noisy.sum() >= 10  # the case this test is about does occur among these rows
    assert np.isnan(weighted_pearson(x, y, counts)).all()


def test_row_weights_are_float64_counts_and_pair_products():
    counts = np.array([[2, 0, 1], [1, 1, 1]])
    singles, pairs = row_weights(counts, np.array([2, 0, 0])), row_weights(counts, np.array([[0, 2], [1, 2]]))
    assert singles.tolist() == [[1, 2, 2], [1, 1, 1]] and pairs.tolist() == [[2, 0], [1, 1]]
    # float64, as documented: integer weights would take numpy's non-BLAS matmul, which rounds differently
    assert singles.dtype == pairs.dtype == np.float64
