"""The multi-bootstrap: its draws, one route to the point estimates, known answers and coverage."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.stability import head_stability_table, pair_stability_table
from headstab.statistics.bootstrap import (
    draw_resamples,
    one_to_one_replicates,
    percentile_interval,
    prompt_weights,
    replicate_best_matches,
    stability_replicates,
)


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


def loop_replicates(draws, grouped, sizes):
    """The replicates by the module docstring's formulas, one resample, anchor and pair at a time (float64)."""
    n_boot, n_seeds = draws.refit_counts.shape
    n_layers, n_heads = grouped.shape[3:5]
    head, layer = np.zeros((n_boot, n_seeds, n_layers, n_heads)), np.zeros((n_boot, n_layers))
    for r in range(n_boot):
        weights = draws.prompt_counts[r] * np.asarray(sizes, dtype=float)
        mixed = sum(w * grouped[g].astype(np.float64) for g, w in enumerate(weights)) / weights.sum()
        best = mixed.max(axis=-1)  # [a, b, layer, head]
        k, total = draws.refit_counts[r], 0.0
        for a in range(n_seeds):
            for b in range(n_seeds):
                head[r, a] += draws.pair_counts[r, a, b] * best[a, b] / (n_seeds - 1)
                if a != b:
                    layer[r] += k[a] * k[b] * best[a, b].mean(axis=-1)
                    total += k[a] * k[b]
        layer[r] /= total
    return head, layer


def test_prompt_and_refit_replicates_follow_the_documented_formulas_resample_by_resample():
    rng = np.random.default_rng(3)
    n_groups, n_seeds, n_layers, n_heads = 5, 4, 2, 3
    grouped, sizes = symmetric_groups(rng, n_groups, n_seeds, n_layers, n_heads), np.array([4, 1, 3, 2, 2])
    draws = draw_resamples(6, n_seeds, n_groups, seed=4)
    head, layer = loop_replicates(draws, grouped, sizes)
    # float32 group mixing and pair sums: rounding over the groups, then over the pair refits' counts
    atol = reduction_atol(np.float32, n_groups + n_seeds)
    for batch_size in (16, 4):  # one batch, and a batch boundary inside the resamples
        out = stability_replicates(draws, grouped, sizes, batch_size=batch_size)
        assert out["head"].dtype == np.float64 and out["head"].shape == (6, n_seeds, n_layers, n_heads)
        np.testing.assert_allclose(out["head"], head, atol=atol)
        np.testing.assert_allclose(out["layer"], layer, atol=atol)
    full = np.tensordot(sizes / sizes.sum(), grouped.astype(np.float64), axes=1).max(axis=-1)
    np.testing.assert_allclose(out["pair_best"], full, atol=reduction_atol(np.float32, n_groups))
    # float64 groups give the same replicates: the torch mixing casts them to float32 itself
    again = stability_replicates(draws, grouped.astype(np.float64), sizes)
    np.testing.assert_allclose(again["head"], head, atol=atol)


def test_refits_only_replicates_follow_the_formulas_in_float64_from_float32_best_matches():
    rng = np.random.default_rng(5)
    n_seeds, n_layers, n_heads = 4, 2, 3
    best = rng.random((n_seeds, n_seeds, n_layers, n_heads)).astype(np.float32)
    draws = draw_resamples(6, n_seeds, 1, seed=6)
    # one group of the best matches themselves: its max over a single candidate is the value
    head, layer = loop_replicates(draws, best[None, ..., None], [1])
    out = stability_replicates(draws, best=best)
    # computed in float64 from the float32 values: float64 rounding only, far below float32's
    atol = reduction_atol(np.float64, n_seeds * n_seeds * n_heads)
    np.testing.assert_allclose(out["head"], head, rtol=0, atol=atol)
    np.testing.assert_allclose(out["layer"], layer, rtol=0, atol=atol)
    exact = best.astype(np.float64)
    off = ~np.eye(n_seeds, dtype=bool)
    np.testing.assert_allclose(out["layer_estimate"], exact[off].mean(axis=(0, 2)), rtol=0, atol=atol)
    np.testing.assert_allclose(out["pair_best"], exact, rtol=0, atol=0)


def test_best_matches_come_in_consecutive_batches_of_the_resamples():
    rng = np.random.default_rng(8)
    grouped, sizes = symmetric_groups(rng, 3, 2, 1, 2), np.array([1, 2, 3])
    draws = draw_resamples(10, 2, 3, seed=9)
    batches = list(replicate_best_matches(grouped, sizes, draws.prompt_counts, batch_size=4))
    assert [(part.start, part.stop) for part, _ in batches] == [(0, 4), (4, 8), (8, 10)]
    weights = prompt_weights(draws.prompt_counts, sizes)
    expected = np.tensordot(weights, grouped.astype(np.float64), axes=1).max(axis=-1)
    got = np.concatenate([values for _, values in batches])
    np.testing.assert_allclose(got, expected, atol=reduction_atol(np.float32, 3))


def test_by_default_small_tensors_go_in_one_batch_and_large_ones_in_batches_of_at_least_16(monkeypatch):
    from headstab.statistics import bootstrap

    rng = np.random.default_rng(8)
    grouped, sizes = symmetric_groups(rng, 3, 2, 1, 2), np.array([1, 2, 3])
    per_resample = grouped[0].size  # 2 x 2 refits, 1 layer, 2 x 2 heads
    draws = draw_resamples(40, 2, 3, seed=9)
    assert [(p.start, p.stop) for p, _ in replicate_best_matches(grouped, sizes, draws.prompt_counts)] == [(0, 40)]
    monkeypatch.setattr(bootstrap, "BATCH_ELEMENTS", per_resample * 5)  # room for 5 resamples: 16, the floor, rules
    parts = [(p.start, p.stop) for p, _ in replicate_best_matches(grouped, sizes, draws.prompt_counts)]
    assert parts == [(0, 16), (16, 32), (32, 40)]
    monkeypatch.setattr(bootstrap, "BATCH_ELEMENTS", per_resample * 20 + 1)
    parts = [(p.start, p.stop) for p, _ in replicate_best_matches(grouped, sizes, draws.prompt_counts)]
    assert parts == [(0, 20), (20, 40)]
    one = stability_replicates(draws, grouped, sizes)
    many = stability_replicates(draws, grouped, sizes, batch_size=3)
    np.testing.assert_allclose(one["layer"], many["layer"], atol=reduction_atol(np.float32, 3))


def test_replicates_need_grouped_with_sizes_or_best():
    grouped = np.ones((2, 3, 3, 1, 2, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="^give either grouped and group_sizes, or best$"):
        stability_replicates(draw_resamples(2, 3, 2, seed=0), grouped)


def test_two_refits_give_the_only_pair_and_bad_sizes_are_refused_with_their_values():
    draws = draw_resamples(20, 2, 3, seed=0)
    assert np.all(draws.refit_counts == 1)  # the only draw with two distinct refits of two
    assert np.all(draws.pair_counts == np.array([[0, 1], [1, 0]]))
    assert draw_resamples(1, 3, 1, seed=0).n_boot == 1
    with pytest.raises(ValueError, match="at least 2 refits; got 1"):
        draw_resamples(10, 1, 5, seed=0)
    with pytest.raises(ValueError, match=r"n_boot and n_groups must be >= 1; got 0, 5"):
        draw_resamples(0, 3, 5, seed=0)
    with pytest.raises(ValueError, match=r"n_boot and n_groups must be >= 1; got 4, 0"):
        draw_resamples(4, 3, 0, seed=0)


def test_draws_are_uniform_over_refits_pair_refits_and_groups():
    n_boot, n_seeds = 20000, 3
    draws = draw_resamples(n_boot, n_seeds, 4, seed=7)
    # Each count has mean 1 by symmetry (the redraw of single-refit rows keeps it); s.e. about 0.006.
    np.testing.assert_allclose(draws.refit_counts.mean(axis=0), 1.0, atol=0.03)
    np.testing.assert_allclose(draws.prompt_counts.mean(axis=0), 1.0, atol=0.03)
    off = ~np.eye(n_seeds, dtype=bool)
    np.testing.assert_allclose(draws.pair_counts.mean(axis=0)[off], 1.0, atol=0.03)


def test_pair_weights_are_products_of_refit_counts_without_self_pairs():
    draws = draw_resamples(1, 3, 1, seed=0)
    draws = type(draws)(draws.prompt_counts, draws.pair_counts, np.array([[2, 1, 0]]))
    expected = np.array([[0, 2, 0], [2, 0, 0], [0, 0, 0]]) / 4  # pairs (0, 1) and (1, 0), weight 2 * 1 each
    np.testing.assert_array_equal(draws.pair_weights()[0], expected)


def test_prompt_weights_are_count_times_size_normalised():
    weights = prompt_weights(np.array([[2, 0, 1], [0, 3, 0]]), np.array([1, 2, 3]))
    np.testing.assert_allclose(weights, [[2 / 5, 0, 3 / 5], [0, 1, 0]], rtol=reduction_rtol(np.float64, 3))


def test_percentile_interval_without_nans_is_the_nan_aware_interval():
    replicates = np.random.default_rng(4).random((37, 3, 2))
    for confidence in (0.5, 0.9, 0.95):
        fast = percentile_interval(replicates, confidence)
        slow = np.nanquantile(replicates, [(1 - confidence) / 2, (1 + confidence) / 2], axis=0)
        np.testing.assert_array_equal(fast[0], slow[0])
        np.testing.assert_array_equal(fast[1], slow[1])
    with_nan = replicates.copy()
    with_nan[0, 0, 0] = np.nan
    low, _ = percentile_interval(with_nan, 0.9)
    assert low[0, 0] == np.quantile(replicates[1:, 0, 0], 0.05) and np.isfinite(low).all()


def test_percentile_interval_is_the_tail_quantiles_ignoring_nans():
    replicates = np.r_[np.arange(101.0), np.nan]  # quantile q of 0..100 is 100 q
    low, high = percentile_interval(replicates, 0.9)
    assert (low, high) == pytest.approx((5.0, 95.0), rel=reduction_rtol(np.float64, 1))
    for confidence in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"statistics.confidence.*got {confidence}"):
            percentile_interval(replicates, confidence)


def test_the_percentile_interval_of_a_max_of_exchangeable_means_sits_above_the_truth():
    # The null's situation: every candidate head has the same true mean, so the max over them is biased up,
    # and the resamples' max more so (docs/statistics.md, "Upward bias for a max of means").
    n_groups, n_seeds, n_heads, mu, sd = 20, 5, 8, 0.5, 0.05
    rng = np.random.default_rng(0)
    above = 0
    for dataset in range(20):
        grouped = mu + sd * rng.standard_normal((n_groups, n_seeds, n_seeds, 1, n_heads, n_heads))
        replicates = stability_replicates(draw_resamples(200, n_seeds, n_groups, seed=dataset), grouped,
                                          np.full(n_groups, 5))  # fmt: skip
        low, high = percentile_interval(replicates["layer"], 0.95)
        estimate = replicates["layer_estimate"][0]
        assert estimate > mu and (low[0] + high[0]) / 2 > estimate
        above += low[0] > mu
    assert above >= 18  # measured: 100 of 100 datasets at 400 resamples


def test_the_docs_label_effect_size_descriptive_and_note_the_max_bias():
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs/statistics.md").read_text().split())
    (row,) = [line for line in text.split("| `") if line.startswith("effect_size`")]
    assert "Descriptive only" in row and "dependent" in row and "no test statistic" in row
    assert "Upward bias for a max of means" in text and "null" in text.split("Upward bias for a max of means")[1][:400]


def test_one_to_one_replicates_are_the_best_match_bootstrap_of_the_assigned_partners_alone():
    rng = np.random.default_rng(13)
    n_groups, n_seeds, n_layers, n_heads = 3, 3, 2, 3
    grouped, sizes = symmetric_groups(rng, n_groups, n_seeds, n_layers, n_heads), np.array([2, 1, 3])
    # each head's partner: a fixed permutation per refit pair and layer, not the best match
    assignment = np.stack([rng.permutation(n_heads) for _ in range(n_seeds * n_seeds * n_layers)])
    assignment = assignment.reshape(n_seeds, n_seeds, n_layers, n_heads)
    partner = assignment[None, ..., None] == np.arange(n_heads)  # [1, a, b, layer, head_a, head_b]
    only_partner = np.where(partner, grouped, np.float32(-1.0))  # similarities are in [0, 1]: the max is the partner
    draws = draw_resamples(30, n_seeds, n_groups, seed=4)
    got = one_to_one_replicates(draws, grouped, sizes, assignment)
    expected = stability_replicates(draws, only_partner, sizes)
    atol = reduction_atol(np.float32, n_groups + n_seeds)
    for key in ("head", "layer", "head_estimate", "layer_estimate", "pair_best"):
        assert got[key].shape == expected[key].shape
        np.testing.assert_allclose(got[key], expected[key], atol=atol)
    best = stability_replicates(draws, grouped, sizes)
    assert (got["head_estimate"] < best["head_estimate"] - atol).any()  # some partner is not the best match


def test_the_batch_size_reaches_the_batches_of_both_bootstraps(monkeypatch):
    from headstab.statistics import bootstrap

    parts = []

    def recorded(*args, **kwargs):
        for part, values in replicate_best_matches(*args, **kwargs):
            parts.append((part.start, part.stop))
            yield part, values

    monkeypatch.setattr(bootstrap, "replicate_best_matches", recorded)
    rng = np.random.default_rng(8)
    grouped, sizes = symmetric_groups(rng, 3, 2, 1, 2), np.array([1, 2, 3])
    draws = draw_resamples(10, 2, 3, seed=9)
    stability_replicates(draws, grouped, sizes, batch_size=4)
    assert parts == [(0, 4), (4, 8), (8, 10)]
    parts.clear()
    one_to_one_replicates(draws, grouped, sizes, np.zeros((2, 2, 1, 2), dtype=np.int64), batch_size=3)
    assert parts == [(0, 3), (3, 6), (6, 9), (9, 10)]
