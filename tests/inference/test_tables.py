"""Interval tables: one route to the point estimates, the null and step-0 columns, and the consistency check."""

from __future__ import annotations

import numpy as np
import pytest

from headstab.inference.comparisons import optimizer_tests
from headstab.inference.prompt_groups import GroupedSimilarity
from headstab.inference.tables import HEAD_INTERVAL_COLUMNS, POOLED_COLUMNS, interval_tables
from headstab.stability import stability_tables

SEEDS = [3, 5, 8, 13]


def grouped_and_pair_tensor(rng, n_groups=5, n_layers=2, n_heads=3, scale=1.0):
    n = len(SEEDS)
    observed = rng.random((n_groups, n, n, n_layers, n_heads, n_heads)).astype(np.float32) * scale
    observed = (observed + observed.transpose(0, 2, 1, 3, 5, 4)) / 2
    sizes = np.arange(1, n_groups + 1)
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1).astype(np.float32)
    pair = rng.random((n, n, n_layers, n_heads, n_layers, n_heads)).astype(np.float32) * 0.1
    for layer in range(n_layers):
        pair[:, :, layer, :, layer, :] = mean[:, :, layer]
    lengths = np.full(sizes.sum(), 6)
    grouped = GroupedSimilarity(observed, observed * 0.5, sizes, SEEDS, np.roll(np.arange(lengths.size), 1), lengths)
    return grouped, pair


def test_point_estimates_equal_the_stability_tables_and_the_columns_are_complete():
    grouped, pair = grouped_and_pair_tensor(np.random.default_rng(0))
    init = GroupedSimilarity(
        grouped.observed * 0.3, grouped.null, grouped.group_sizes, SEEDS, grouped.partners, grouped.lengths
    )
    tables = interval_tables(pair, grouped, "primary", n_boot=50, seed=0, confidence=0.9, init=init)
    plain = stability_tables(pair, SEEDS, "primary")["head_stability"]
    merged = plain.merge(
        tables["head"], on=["promptset", "scope", "anchor_seed", "layer", "head"], validate="one_to_one"
    )
    assert len(merged) == len(plain) and list(tables["head"].columns) == HEAD_INTERVAL_COLUMNS
    same = merged[merged["scope"] == "same_layer"]
    atol = 16 * np.finfo(np.float32).eps
    np.testing.assert_allclose(same["above_null"], same["stability"] - same["null"], atol=atol)
    assert (same["ci_low"] <= same["stability"] + atol).all() and (same["stability"] <= same["ci_high"] + atol).all()
    np.testing.assert_allclose(
        same["init"], 0.3 * same["stability"], rtol=1e-5
    )  # the max commutes with a positive scale
    cross = merged[merged["scope"] == "cross_layer"]
    assert cross["null"].isna().all() and (cross["resampled"] == "refits").all()
    pooled = tables["pooled"]
    assert list(pooled.columns) == POOLED_COLUMNS and (pooled["n_refits"] == 4).all()
    assert set(tables["gap"]["statistic"]) == {"s_max", "s_min", "delta_s", "r_max", "r_min"}


def test_prompt_groups_from_other_caches_are_refused():
    grouped, pair = grouped_and_pair_tensor(np.random.default_rng(1))
    with pytest.raises(ValueError, match="different caches.*forcerun"):
        interval_tables(pair * 0.9, grouped, "primary", n_boot=10, seed=0, confidence=0.95)


def test_optimizer_tests_find_a_layer_difference_and_equivalent_perplexities():
    rng = np.random.default_rng(2)
    adam, _ = grouped_and_pair_tensor(rng, scale=0.5)
    shifted = adam.observed.copy()
    shifted[:, :, :, 1] += 0.4  # AdamW's second layer more stable, first unchanged
    adamw = GroupedSimilarity(shifted, adam.null, adam.group_sizes, SEEDS, adam.partners, adam.lengths)
    table = optimizer_tests(adam, adamw, np.array([20.0, 20.2, 19.9, 20.1]), np.array([20.1, 20.0, 20.2, 20.0]),
                            n_boot=200, permutations=999, seed=0, confidence=0.95, perplexity_margin=0.02)  # fmt: skip
    layers = table[table["statistic"] == "layer_stability"].set_index("layer")
    assert layers.loc[0, "difference"] == pytest.approx(0.0, abs=1e-6)
    assert layers.loc[1, "difference"] == pytest.approx(0.4, abs=1e-5)
    assert layers.loc[1, "ci_low"] > 0.3 and layers.loc[0, "ci_low"] <= 0 <= layers.loc[0, "ci_high"]
    assert layers.loc[1, "p_value"] == pytest.approx(2 / 70, abs=0.02)  # 4 vs 4 refits: the most extreme split
    perplexity = table[table["statistic"] == "perplexity"].iloc[0]
    assert (
        perplexity["test"] == "tost"
        and perplexity["equivalent"]
        and perplexity["margin"] == pytest.approx(0.02 * 20.05)
    )
