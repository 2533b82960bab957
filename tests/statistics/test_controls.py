"""Controls beside stability: entropy, the content variant, commonness against its null, ΔS of the nulls."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers.tolerances import reduction_atol

from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.controls import CONTENT_COLUMNS
from headstab.statistics.interval_tables import interval_tables

SEEDS = [2, 4, 6, 9]


def _symmetric(rng, shape):
    values = rng.random(shape).astype(np.float32)
    return (values + values.transpose(0, 2, 1, 3, 5, 4)) / 2


def _pair_tensor(observed, sizes):
    n, _, n_layers, n_heads = observed.shape[1:5]
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1).astype(np.float32)
    pair = np.full((n, n, n_layers, n_heads, n_layers, n_heads), 0.01, dtype=np.float32)
    for layer in range(n_layers):
        pair[:, :, layer, :, layer, :] = mean[:, :, layer]
    return pair


def controls_case(n_layers=3, n_heads=2, content=True):
    rng = np.random.default_rng(11)
    sizes = np.array([2, 3, 1, 2])
    shape = (len(sizes), len(SEEDS), len(SEEDS), n_layers, n_heads, n_heads)
    observed, null = _symmetric(rng, shape), _symmetric(rng, shape) * 0.5
    lengths = np.full(sizes.sum(), 6)
    grouped = GroupedSimilarity(
        observed, null, sizes, SEEDS, np.roll(np.arange(lengths.size), 1), lengths,
        entropy=rng.random((len(SEEDS), n_layers, n_heads)),
        content_observed=observed * 0.5 if content else None,
        content_null=null * 0.25 if content else None,
    )  # fmt: skip
    tables = interval_tables(_pair_tensor(observed, sizes), grouped, "p", n_boot=30, seed=1, confidence=0.9)
    return grouped, tables


def test_entropy_sits_beside_every_stability_row_and_averages_over_heads_and_refits():
    grouped, tables = controls_case()
    head = tables["head"]
    for scope in ("same_layer", "cross_layer"):  # a property of the head, whatever the scope
        rows = head[head["scope"] == scope]
        np.testing.assert_array_equal(rows["entropy"].to_numpy().reshape(grouped.entropy.shape), grouped.entropy)
    layer = tables["layer"][tables["layer"]["scope"] == "same_layer"]
    np.testing.assert_allclose(layer["entropy"].to_numpy().reshape(4, 3), grouped.entropy.mean(axis=-1))
    pooled = tables["pooled"][tables["pooled"]["scope"] == "same_layer"]
    np.testing.assert_allclose(pooled["entropy"], grouped.entropy.mean(axis=(0, 2)))


def test_content_columns_are_the_stability_of_the_content_tensors_with_their_own_null():
    grouped, tables = controls_case()
    atol = reduction_atol(np.float32, 8 + len(SEEDS))
    head = tables["head"][tables["head"]["scope"] == "same_layer"]
    # the max over candidates commutes with a positive scale: content = stability / 2, its null = null / 4
    np.testing.assert_allclose(head["stability_content"], _head_stability(grouped) / 2, atol=atol)
    np.testing.assert_allclose(head["stability_content_null"], head["null"] / 4, atol=atol)
    np.testing.assert_allclose(
        head["stability_content_above_null"], head["stability_content"] - head["stability_content_null"], atol=atol
    )
    draws = draw_resamples(30, len(SEEDS), 4, 1)
    content = stability_replicates(draws, grouped.content_observed, grouped.group_sizes)
    content_null = stability_replicates(draws, grouped.content_null, grouped.group_sizes)
    low, high = np.quantile(content["layer"] - content_null["layer"], [0.05, 0.95], axis=0)
    pooled = tables["pooled"][tables["pooled"]["scope"] == "same_layer"]
    np.testing.assert_allclose(pooled["stability_content_above_null_ci_low"], low, atol=2 * atol)
    np.testing.assert_allclose(pooled["stability_content_above_null_ci_high"], high, atol=2 * atol)
    assert tables["head"][tables["head"]["scope"] == "cross_layer"][CONTENT_COLUMNS].isna().all().all()
    _, without = controls_case(content=False)
    for name in ("head", "layer", "pooled"):
        assert (
            without[name][CONTENT_COLUMNS].isna().all().all()
            and (without[name][CONTENT_COLUMNS].dtypes == np.float64).all()
        )
    gap = tables["gap"].set_index("statistic")
    assert {"delta_s_content", "delta_s_content_above_null"} <= set(gap.index)
    assert not {"delta_s_content"} & set(without["gap"]["statistic"])


def _head_stability(grouped):
    best = grouped.mean().max(axis=-1)  # [a, b, layer, head]
    n = len(grouped.seeds)
    return (best[~np.eye(n, dtype=bool)].reshape(n, n - 1, *best.shape[2:]).mean(axis=1)).ravel()


def test_commonness_null_uses_the_partner_prompts_within_one_refit_by_hand():
    rng = np.random.default_rng(3)
    sizes = np.array([1, 1])
    n_heads = 3
    observed = _symmetric(rng, (2, 2, 2, 1, n_heads, n_heads))
    null = np.full_like(observed, 0.25)
    null[..., np.arange(n_heads), np.arange(n_heads)] = 0.5  # a head against itself on the partner prompt
    lengths = np.full(2, 5)
    grouped = GroupedSimilarity(observed, null, sizes, SEEDS[:2], np.array([1, 0]), lengths)
    common = interval_tables(_pair_tensor(observed, sizes), grouped, "p", n_boot=20, seed=0, confidence=0.9)[
        "commonness"
    ]
    assert common["commonness_null"].to_numpy() == pytest.approx((0.5 + 2 * 0.25) / 3)  # Eq. 10, the head included
    assert common["commonness_excl_self_null"].to_numpy() == pytest.approx(0.25)
    within = observed.mean(axis=0)[[0, 1], [0, 1]]  # [seed, layer, head_a, head_b]
    expected = within.mean(axis=-1).ravel() - (0.5 + 2 * 0.25) / 3
    np.testing.assert_allclose(common["commonness_above_null"], expected, atol=reduction_atol(np.float32, 4))
    assert (common["commonness_null_ci_low"] <= common["commonness_null"] + 1e-12).all()
    assert (common["commonness_above_null_ci_low"] <= common["commonness_above_null_ci_high"]).all()


def test_gap_rows_give_the_range_of_each_control_with_its_interval_and_no_p_value():
    grouped, tables = controls_case()
    gap = tables["gap"].set_index("statistic")
    same = tables["pooled"][tables["pooled"]["scope"] == "same_layer"]
    atol = reduction_atol(np.float32, 16)
    assert gap.loc["delta_s_prompt_null", "estimate"] == pytest.approx(np.ptp(same["null"]), abs=atol)
    assert gap.loc["delta_s_above_null", "estimate"] == pytest.approx(np.ptp(same["above_null"]), abs=atol)
    controls = gap.loc[["delta_s_prompt_null", "delta_s_above_null", "delta_s_content", "delta_s_content_above_null"]]
    assert (controls["n_boot"] == 30).all() and controls["p_value"].isna().all()
    assert (controls["ci_low"] <= controls["ci_high"]).all()
    assert "delta_s_layer_null" not in gap.index and "delta_s_excess" not in gap.index
    # a planted difference above the null: layer 0's heads match far better than the others'
    planted = grouped.observed.copy()
    planted[:, :, :, 0] += 2.0
    shifted = dataclasses.replace(grouped, observed=planted)
    tables = interval_tables(
        _pair_tensor(planted, grouped.group_sizes), shifted, "p", n_boot=30, seed=1, confidence=0.9
    )
    assert tables["gap"].set_index("statistic").loc["delta_s_above_null", "ci_low"] > 1.0
