"""One-to-one stability's intervals and null: the fixed full-data assignment, resampled like best match."""

from __future__ import annotations

import numpy as np
from helpers.tolerances import reduction_atol

from headstab.matching import assigned_values, one_to_one_assignment
from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.stability import stability_tables
from headstab.statistics.bootstrap import draw_resamples, one_to_one_replicates, prompt_weights
from headstab.statistics.interval_tables import ONE_TO_ONE, interval_tables

SEEDS = [2, 4, 6, 9]
SIZES = np.array([1, 2, 3, 4, 5])


def symmetric_groups(rng, n_layers=2, n_heads=3, planted=0.0):
    """Symmetric float32 per-group similarity of SEEDS; `planted` adds to the diagonal of every pair's blocks."""
    n = len(SEEDS)
    values = rng.random((len(SIZES), n, n, n_layers, n_heads, n_heads)).astype(np.float32) * 0.5
    values = (values + values.transpose(0, 2, 1, 3, 5, 4)) / 2
    return values + np.float32(planted) * np.eye(n_heads, dtype=np.float32)


def pair_tensor(observed):
    n, _, n_layers, n_heads = observed.shape[1:5]
    mean = np.tensordot(SIZES / SIZES.sum(), observed.astype(np.float64), axes=1).astype(np.float32)
    pair = np.full((n, n, n_layers, n_heads, n_layers, n_heads), 0.01, dtype=np.float32)
    for layer in range(n_layers):
        pair[:, :, layer, :, layer, :] = mean[:, :, layer]
    return pair


def case(rng, n_boot=40):
    observed, null = symmetric_groups(rng), symmetric_groups(rng) * 0.5
    lengths = np.full(SIZES.sum(), 5)
    grouped = GroupedSimilarity(observed, null, SIZES, SEEDS, np.roll(np.arange(lengths.size), 1), lengths)
    pair = pair_tensor(observed)
    return grouped, pair, interval_tables(pair, grouped, "p", n_boot=n_boot, seed=3, confidence=0.8)


def test_one_to_one_columns_are_the_fixed_assignment_replicates_of_observed_and_null():
    grouped, pair, tables = case(np.random.default_rng(0))
    draws = draw_resamples(40, len(SEEDS), len(SIZES), 3)
    blocks = np.moveaxis(np.diagonal(pair, axis1=2, axis2=4), -1, 2)
    observed = one_to_one_replicates(draws, grouped.observed, SIZES, one_to_one_assignment(blocks))
    null = one_to_one_replicates(draws, grouped.null, SIZES, one_to_one_assignment(grouped.mean("null")))
    head = tables["head"].set_index(["scope", "anchor_seed", "layer", "head"]).loc["same_layer"]
    atol = reduction_atol(np.float32, len(SIZES) + len(SEEDS))

    def column(name):
        return head[name].to_numpy().reshape(len(SEEDS), 2, 3)

    low, high = np.quantile(observed["head"], [0.1, 0.9], axis=0)
    np.testing.assert_allclose(column("one_to_one_ci_low"), low, atol=atol)
    np.testing.assert_allclose(column("one_to_one_ci_high"), high, atol=atol)
    np.testing.assert_allclose(column("one_to_one_null"), null["head_estimate"], atol=atol)
    np.testing.assert_allclose(
        column("one_to_one_above_null"), observed["head_estimate"] - null["head_estimate"], atol=2 * atol
    )
    assert head["one_to_one_init"].isna().all()  # no step-0 groups given
    cross = tables["head"][tables["head"]["scope"] == "cross_layer"]
    assert cross[ONE_TO_ONE].isna().all().all()


def test_one_to_one_estimates_equal_the_stability_tables_and_never_exceed_best_match():
    grouped, pair, tables = case(np.random.default_rng(1))
    plain = stability_tables(pair, SEEDS, "p")
    heads = plain["head_stability"].merge(tables["head"], on=["promptset", "scope", "anchor_seed", "layer", "head"])
    same = heads[heads["scope"] == "same_layer"]
    atol = reduction_atol(np.float32, len(SIZES) + len(SEEDS))
    assert (same["stability_one_to_one"] <= same["stability"] + atol).all()
    assert (same["stability_one_to_one"] < same["stability"] - atol).any()  # random blocks: some heads collide
    inside = (same["one_to_one_ci_low"] <= same["stability_one_to_one"] + atol) & (
        same["stability_one_to_one"] <= same["one_to_one_ci_high"] + atol
    )
    assert inside.all()
    pooled = tables["pooled"].set_index(["scope", "layer"]).loc["same_layer"]
    by_layer = same.groupby("layer")["stability_one_to_one"].mean()
    np.testing.assert_allclose(pooled["stability_one_to_one"], by_layer.to_numpy(), atol=atol)
    assert tables["pooled"].loc[tables["pooled"]["scope"] == "cross_layer", "stability_one_to_one"].isna().all()


def solved_per_resample(grouped, draws):
    """Head replicates [boot, anchor, layer, head] with the assignment solved again on every resample."""
    n = len(SEEDS)
    weights = prompt_weights(draws.prompt_counts, SIZES)
    out = np.empty((draws.n_boot, n, *grouped.shape[3:5]))
    for r in range(draws.n_boot):
        mixed = np.tensordot(weights[r], grouped.astype(np.float64), axes=1)
        values = assigned_values(mixed, one_to_one_assignment(mixed))
        out[r] = np.einsum("ab,abli->ali", draws.pair_counts[r], values) / (n - 1)
    return out


def test_fixed_assignment_layer_replicates_never_exceed_a_solve_per_resample_and_equal_it_when_heads_are_distinct():
    rng = np.random.default_rng(2)
    draws = draw_resamples(30, len(SEEDS), len(SIZES), 5)
    atol = reduction_atol(np.float32, len(SIZES) + len(SEEDS))
    for planted, equal in ((0.0, False), (2.0, True)):
        grouped = symmetric_groups(rng, planted=planted)
        assignment = one_to_one_assignment(np.tensordot(SIZES / SIZES.sum(), grouped.astype(np.float64), axes=1))
        fixed = one_to_one_replicates(draws, grouped, SIZES, assignment)["head"]
        solved = solved_per_resample(grouped, draws)
        # The solve maximises the sum over a layer's heads: a layer's mean is never above, a single head can be.
        assert (fixed.mean(axis=-1) <= solved.mean(axis=-1) + atol).all()
        if equal:  # each head's own partner dominates: every resample keeps the assignment
            np.testing.assert_allclose(fixed, solved, atol=atol)
        else:  # heads of similar similarity: some resamples re-assign, and the fixed layer replicate is lower
            assert (fixed.mean(axis=-1) < solved.mean(axis=-1) - atol).any()
