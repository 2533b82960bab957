"""The multi-bootstrap: its draws, one route to the point estimates, known answers and coverage."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import reduction_atol

from headstab.inference.bootstrap import draw_resamples, percentile_interval, stability_replicates
from headstab.stability import head_stability_table, pair_stability_table


def symmetric_groups(rng, n_groups, n_seeds, n_layers, n_heads):
    values = rng.random((n_groups, n_seeds, n_seeds, n_layers, n_heads, n_heads)).astype(np.float32)
    return (values + values.transpose(0, 2, 1, 3, 5, 4)) / 2


def test_draws_are_counts_with_the_documented_constraints_and_repeat_with_the_seed():
    draws = draw_resamples(300, 4, 5, seed=2)
    assert draws.prompt_counts.shape == (300, 5) and np.all(draws.prompt_counts.sum(axis=1) == 5)
    assert np.all(np.diagonal(draws.pair_counts, axis1=1, axis2=2) == 0)
    assert np.all(draws.pair_counts.sum(axis=2) == 3)  # each anchor draws N - 1 pair refits
    assert np.all(draws.refit_counts.sum(axis=1) == 4)
    assert np.all((draws.refit_counts > 0).sum(axis=1) >= 2)  # never one refit compared with itself only
    np.testing.assert_allclose(draws.pair_weights().sum(axis=(1, 2)), 1.0)
    again = draw_resamples(300, 4, 5, seed=2)
    assert np.array_equal(draws.pair_counts, again.pair_counts)
    with pytest.raises(ValueError, match="at least 2 refits"):
        draw_resamples(10, 1, 5, seed=0)


def test_point_estimates_are_the_stability_tables_of_the_mean_tensor():
    rng = np.random.default_rng(0)
    grouped, sizes = symmetric_groups(rng, 4, 3, 2, 3), np.array([3, 2, 2, 1])
    out = stability_replicates(draw_resamples(20, 3, 4, seed=0), grouped, sizes)
    mean = np.tensordot(sizes / sizes.sum(), grouped.astype(np.float64), axes=1)
    heads = head_stability_table(pair_stability_table(mean, [5, 6, 7], "p"))
    expected = heads.set_index(["anchor_seed", "layer", "head"])["stability"].to_numpy().reshape(3, 2, 3)
    atol = reduction_atol(np.float32, 4)
    np.testing.assert_allclose(out["head_estimate"], expected, atol=atol)
    np.testing.assert_allclose(out["layer_estimate"], expected.mean(axis=(0, 2)), atol=atol)


def test_refits_that_are_exact_copies_give_one_and_a_zero_width_interval():
    grouped = np.ones((5, 4, 4, 2, 3, 3), dtype=np.float32)
    out = stability_replicates(draw_resamples(200, 4, 5, seed=1), grouped, np.full(5, 2))
    low, high = percentile_interval(out["layer"])
    atol = reduction_atol(np.float64, 4 * 4 * 3)  # weighted means over pairs and heads
    np.testing.assert_allclose(out["layer_estimate"], 1.0, atol=atol)
    np.testing.assert_allclose(high - low, 0.0, atol=atol)


def test_refits_only_bootstrap_from_best_matches_weighs_pair_refits_by_their_counts():
    best = np.arange(3 * 3 * 1 * 1, dtype=float).reshape(3, 3, 1, 1)
    draws = draw_resamples(50, 3, 1, seed=0)
    out = stability_replicates(draws, best=best)
    r = 7
    expected = (draws.pair_counts[r, 0] * best[0, :, 0, 0]).sum() / 2
    assert out["head"][r, 0, 0, 0] == pytest.approx(expected)
    assert out["head_estimate"][0, 0, 0] == pytest.approx((best[0, 1] + best[0, 2]).item() / 2)


def population(rng, mean, n_seeds, n_groups):
    """One head per layer (the max is the value itself): refit, prompt-group and pair effects around `mean`."""
    refit = rng.normal(scale=0.05, size=n_seeds)
    prompt = rng.normal(scale=0.05, size=n_groups)
    noise = rng.normal(scale=0.03, size=(n_groups, n_seeds, n_seeds))
    values = (
        mean
        + refit[None, :, None]
        + refit[None, None, :]
        + prompt[:, None, None]
        + (noise + noise.transpose(0, 2, 1)) / 2
    )
    return values[..., None, None, None].astype(np.float32)


def test_the_interval_covers_the_true_mean_at_about_the_nominal_rate():
    rng = np.random.default_rng(11)
    n_datasets, hits = 200, 0
    for dataset in range(n_datasets):
        grouped = population(rng, 0.6, n_seeds=12, n_groups=12)
        out = stability_replicates(draw_resamples(200, 12, 12, seed=dataset), grouped, np.full(12, 5))
        low, high = percentile_interval(out["layer"], 0.95)
        hits += int(low[0] <= 0.6 <= high[0])
    # Binomial(200, 0.95) has s.d. 3.1%; the percentile bootstrap undercovers slightly at this size.
    assert 0.87 <= hits / n_datasets <= 0.995, hits


def test_interval_of_constant_replicates_and_bad_confidence():
    low, high = percentile_interval(np.full((10, 2), 0.3))
    np.testing.assert_array_equal(low, 0.3)
    with pytest.raises(ValueError, match="statistics.confidence"):
        percentile_interval(np.zeros(3), 1.5)
