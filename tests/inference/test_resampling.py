"""Intervals of correlations and pair means: known answers, commonness against Eq. 10."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tolerances import reduction_atol

from headstab.inference.resampling import commonness_replicates, mean_interval, pair_mean_interval, pearson_interval
from headstab.sections.ablation import ablation_correlation_intervals
from headstab.sections.residual_cka import layer_cka_table
from headstab.stability import commonness_table


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
