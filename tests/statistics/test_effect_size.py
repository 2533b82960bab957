"""Cohen's d_z of paired differences and the rounding below which it is NaN (the tables' effect_size column is
tested through the tables in test_interval_tables.py)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.tolerances import reduction_rtol

from headstab.statistics.effect_size import RELATIVE_FLOOR, effect_size, similarity_rounding


def cohen_dz(differences, axis):
    return differences.mean(axis=axis) / differences.std(axis=axis, ddof=1)


def test_effect_size_resolution_is_eps_times_the_largest_magnitude():
    eps = float(np.finfo(np.float32).eps)
    magnitudes = np.full((1, 4), 0.5)
    # n = 4 values within eps x 0.5 of one value: s.d. at most eps x 0.5 x sqrt(4 / 3), the resolution
    at_rounding = 1e-3 + eps * 0.5 * np.array([[1.0, -1.0, 1.0, -1.0]])
    assert np.isnan(effect_size(at_rounding, magnitudes, (1,), eps)).all()
    above = 1e-3 + 4 * eps * 0.5 * np.array([[1.0, -1.0, 1.0, -1.0]])
    np.testing.assert_allclose(
        effect_size(above, magnitudes, (1,), eps), cohen_dz(above, 1), rtol=reduction_rtol(np.float64, 4)
    )
    assert np.isnan(effect_size(above[:, :1], magnitudes[:, :1], (1,), eps)).all()  # one pair: no s.d.
    # the largest magnitude over the reduced axes sets it, not the first or the mean
    larger = np.array([[0.5, 0.5, 4.0, 0.5]])
    assert np.isnan(effect_size(above, larger, (1,), eps)).all()


def test_an_sd_below_a_ten_thousandth_of_the_mean_is_no_effect_size():
    # mean 10^4 and s.d. exactly 1 (ddof 1): at the floor, NaN; just above it, d_z = 10^4
    values = np.array([[9999.0, 10000.0, 10001.0]])
    assert RELATIVE_FLOOR * 1e4 == 1.0
    assert np.isnan(effect_size(values, np.abs(values), (1,), 0.0)).all()
    wider = np.array([[9998.0, 10000.0, 10002.0]])  # s.d. 2: d_z 5000
    np.testing.assert_allclose(effect_size(wider, np.abs(wider), (1,), 0.0), [5000.0])
    np.testing.assert_allclose(effect_size(-wider, np.abs(wider), (1,), 0.0), [-5000.0])  # |mean|: either sign
    # float32 rounding of similarities near 0.5 accumulated over many entries: a few ulps of spread around 0.25
    eps = float(np.finfo(np.float32).eps)
    ulps = 0.25 + 8 * eps * np.array([[1.0, -1.0, 0.5, -0.5, 0.0]])
    assert np.abs(cohen_dz(ulps, 1)).max() > 1e5 and np.isnan(effect_size(ulps, np.full((1, 5), 0.5), (1,), eps))


@pytest.mark.parametrize("axes", [(1,), (1, 2)])
def test_effect_size_reduces_the_given_axes_only(axes):
    rng = np.random.default_rng(0)
    differences = rng.normal(0.3, 0.1, size=(3, 5, 4))
    result = effect_size(differences, np.ones_like(differences), axes, float(np.finfo(np.float32).eps))
    expected = differences.mean(axis=axes) / differences.std(axis=axes, ddof=1)
    np.testing.assert_allclose(result, expected, rtol=reduction_rtol(np.float64, 20))
    assert result.shape == expected.shape


def test_the_resolution_grows_with_sqrt_n_over_n_minus_1_of_each_rows_own_magnitude():
    # n = 3 values m - d, m, m + d have s.d. d (ddof 1); resolution eps x M x sqrt(3 / 2) = 1.2247e-3 here
    eps, m = 1e-3, 1e-3  # |mean| 1e-3: the relative floor (1e-7) is far below
    spread = np.array([[-1.0, 0.0, 1.0]])
    magnitudes = np.array([[1.0, 1.0, 1.0], [10.0, 10.0, 10.0]])
    below, above = m + 1.1e-3 * spread, m + 1.3e-3 * spread  # s.d. 1.1e-3 and 1.3e-3
    assert np.std(below, ddof=1) == pytest.approx(1.1e-3) and np.std(above, ddof=1) == pytest.approx(1.3e-3)
    assert np.isnan(effect_size(below, magnitudes[:1], (1,), eps)).all()
    np.testing.assert_allclose(effect_size(above, magnitudes[:1], (1,), eps), m / 1.3e-3)
    # each row against its own largest magnitude: the second row's 10 raises only its own resolution
    both = effect_size(np.vstack([above, above]), magnitudes, (1,), eps)
    np.testing.assert_allclose(both[0], m / 1.3e-3)
    np.testing.assert_array_equal(np.isnan(both), [False, True])
    # two pairs are enough for an s.d.
    np.testing.assert_allclose(effect_size(np.array([[0.1, 0.3]]), np.ones((1, 2)), (1,), 0.0), [0.2 / np.sqrt(0.02)])


def test_similarity_rounding_is_eps_times_the_root_of_the_longest_prompts_lower_triangle():
    eps32 = float(np.finfo(np.float32).eps)
    assert similarity_rounding(np.float32, np.array([3, 5, 4])) == pytest.approx(eps32 * np.sqrt(15))  # 5 x 6 / 2
    assert similarity_rounding(np.float64, [1]) == pytest.approx(float(np.finfo(np.float64).eps))
