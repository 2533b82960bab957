"""Controls beside stability: entropy, the content variant, commonness against its null, ΔS of the nulls."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.controls import (
    CONTENT_COLUMNS,
    attach_content_share,
    content_columns,
    entropy_column,
    gap_control_rows,
)
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


def test_entropy_column_is_float64_and_nan_without_entropy():
    entropy = (np.arange(12, dtype=np.float32) / 7).reshape(2, 3, 2)  # as a file might store it
    heads = entropy_column(entropy, (2, 3, 2))
    assert heads.dtype == np.float64
    np.testing.assert_array_equal(heads, entropy.astype(np.float64))
    layers = entropy_column(entropy, (2, 3), (2,))
    assert layers.dtype == np.float64
    np.testing.assert_allclose(layers, entropy.astype(np.float64).mean(axis=2), rtol=1e-15)
    missing = entropy_column(None, (2, 3))
    assert missing.dtype == np.float64 and missing.shape == (2, 3) and np.isnan(missing).all()


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
    atol = reduction_atol(np.float32, 4)
    np.testing.assert_allclose(common["commonness_above_null"], expected, atol=atol)
    off_diagonal = (within.sum(axis=-1) - np.diagonal(within, axis1=-2, axis2=-1)) / (n_heads - 1)
    np.testing.assert_allclose(common["commonness_excl_self_above_null"], off_diagonal.ravel() - 0.25, atol=atol)
    for part in ("commonness_null", "commonness_above_null", "commonness_excl_self_null"):
        assert (common[f"{part}_ci_low"] <= common[part] + atol).all()
        assert (common[part] <= common[f"{part}_ci_high"] + atol).all()
    assert (common["calibration"] == "descriptive").all()  # 2 prompt groups


def _planted_commonness(n_heads: int, n_groups: int = 6):
    """One refit, one layer: head 0 shares nothing with its peers (observed = null = 0.3 against each, its
    pattern on a partner prompt 0.4 like itself); heads 1.. share 0.8 against a null of 0.3. Each group
    adds +-0.05 that cancels over the (equal-sized) groups."""
    observed = np.full((n_groups, 2, 2, 1, n_heads, n_heads), 0.8, dtype=np.float32)
    null = np.full_like(observed, 0.3)
    observed[..., 1:, 1:] += np.resize([0.05, -0.05], n_groups).astype(np.float32)[:, None, None, None, None, None]
    observed[..., 0, :] = observed[..., :, 0] = 0.3
    observed[..., np.arange(n_heads), np.arange(n_heads)] = 1.0  # a pattern against itself
    null[..., 0, 0] = 0.4
    null[..., np.arange(1, n_heads), np.arange(1, n_heads)] = 0.9
    sizes = np.full(n_groups, 2)
    lengths = np.full(sizes.sum(), 5)
    partners = np.roll(np.arange(lengths.size), 1)
    grouped = GroupedSimilarity(observed, null, sizes, SEEDS[:2], partners, lengths)
    tables = interval_tables(_pair_tensor(observed, sizes), grouped, "p", n_boot=200, seed=2, confidence=0.9)
    return tables["commonness"].query("seed == @SEEDS[0]").set_index("head")


@pytest.mark.parametrize("n_heads", [4, 8])
def test_a_head_sharing_nothing_with_its_peers_is_at_its_null_only_without_the_self_term(n_heads):
    common = _planted_commonness(n_heads)
    atol = reduction_atol(np.float32, 6 * n_heads)
    # without self: its peers on the same prompt are as alike as on partner prompts
    assert common.loc[0, "commonness_excl_self_above_null"] == pytest.approx(0.0, abs=atol)
    assert common.loc[0, "commonness_excl_self_null"] == pytest.approx(0.3, abs=atol)
    # Eq. 10 counts its match with itself: 1 on the same prompt, 0.4 on the partner
    assert common.loc[0, "commonness_above_null"] == pytest.approx((1.0 - 0.4) / n_heads, abs=atol)
    # a sharing head: (0.8 - 0.3) against each of its n - 2 sharing peers, 0 against head 0
    sharing = (n_heads - 2) * 0.5 / (n_heads - 1)
    assert common.loc[1, "commonness_excl_self_above_null"] == pytest.approx(sharing, abs=atol)
    assert common.loc[1, "commonness_above_null"] == pytest.approx(((n_heads - 2) * 0.5 + 0.1) / n_heads, abs=atol)
    # head 0's peers do not move with the groups, the sharing heads' do: a zero-width interval and a wide one
    assert common.loc[0, "commonness_excl_self_above_null_ci_high"] - common.loc[
        0, "commonness_excl_self_above_null_ci_low"
    ] == pytest.approx(0.0, abs=atol)
    low, high = common.loc[1, ["commonness_excl_self_above_null_ci_low", "commonness_excl_self_above_null_ci_high"]]
    assert low < sharing - 0.005 and high > sharing + 0.005
    peers = ((n_heads - 2) * 0.8 + 0.3) / (n_heads - 1)  # commonness_excl_self of head 1
    assert common.loc[1, "commonness_excl_self_ci_low"] < peers < common.loc[1, "commonness_excl_self_ci_high"]


def test_excl_self_intervals_are_percentiles_of_the_resampled_group_means():
    grouped, tables = controls_case(n_layers=2, n_heads=3)
    draws = draw_resamples(30, len(SEEDS), len(grouped.group_sizes), 1)
    weights = draws.prompt_counts * grouped.group_sizes
    weights = weights / weights.sum(axis=1, keepdims=True)

    def excl_self(tensor):  # [group, seed, layer, head]: mean over the refit's other heads, per group
        within = np.stack([tensor[:, a, a].astype(np.float64) for a in range(len(SEEDS))], axis=1)
        return (within.sum(axis=-1) - np.diagonal(within, axis1=-2, axis2=-1)) / 2

    observed, null = excl_self(grouped.observed), excl_self(grouped.null)
    common = tables["commonness"]
    atol = reduction_atol(np.float32, 3 * len(grouped.group_sizes))
    for column, per_group in (
        ("commonness_excl_self", observed),
        ("commonness_excl_self_null", null),
        ("commonness_excl_self_above_null", observed - null),
    ):
        low, high = np.quantile(np.tensordot(weights, per_group, axes=1), [0.05, 0.95], axis=0)
        np.testing.assert_allclose(common[f"{column}_ci_low"], low.ravel(), atol=atol, err_msg=column)
        np.testing.assert_allclose(common[f"{column}_ci_high"], high.ravel(), atol=atol, err_msg=column)
    full = np.tensordot(grouped.group_sizes / grouped.group_sizes.sum(), observed - null, axes=1)
    np.testing.assert_allclose(common["commonness_excl_self_above_null"], full.ravel(), atol=atol)
    assert (common["calibration"] == "descriptive").all()  # 4 prompt groups


def test_one_head_layers_have_no_commonness_without_self_and_two_head_layers_their_one_peer():
    _, tables = controls_case(n_layers=2, n_heads=1)
    common = tables["commonness"]
    excl = [column for column in common.columns if column.startswith("commonness_excl_self")]
    assert len(excl) == 8 and common[excl].isna().all().all() and (common[excl].dtypes == np.float64).all()
    assert common["commonness_above_null"].notna().all()
    grouped, tables = controls_case(n_layers=2, n_heads=2)
    peer = grouped.mean("observed") - grouped.mean("null")  # [a, b, layer, head_a, head_b]
    expected = np.stack([peer[a, a][..., [0, 1], [1, 0]] for a in range(len(SEEDS))])  # [seed, layer, head]
    atol = reduction_atol(np.float32, 8)
    np.testing.assert_allclose(tables["commonness"]["commonness_excl_self_above_null"], expected.ravel(), atol=atol)


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


def test_the_content_share_sits_beside_the_content_variant_averaged_over_heads_and_refits():
    grouped, _ = controls_case()
    share = np.random.default_rng(3).random(grouped.entropy.shape)
    sized = dataclasses.replace(grouped, content_share=share)
    pair = _pair_tensor(grouped.observed, grouped.group_sizes)
    tables = interval_tables(pair, sized, "p", n_boot=30, seed=1, confidence=0.9)
    head, layer, pooled = (tables[name][tables[name]["scope"] == "same_layer"] for name in ("head", "layer", "pooled"))
    np.testing.assert_array_equal(head["content_share"].to_numpy().reshape(share.shape), share)
    np.testing.assert_allclose(layer["content_share"].to_numpy().reshape(4, 3), share.mean(axis=-1))
    np.testing.assert_allclose(pooled["content_share"], share.mean(axis=(0, 2)))
    columns = list(tables["head"].columns)
    assert columns.index("content_share") == columns.index("stability_content") + 1
    for name in ("head", "layer", "pooled"):
        assert tables[name].loc[tables[name]["scope"] == "cross_layer", "content_share"].isna().all()
    for name, frame in controls_case()[1].items():  # the same groups without a share: NaN, the rest unchanged
        if name in ("head", "layer", "pooled"):
            assert frame["content_share"].isna().all()
            pd.testing.assert_frame_equal(
                frame.drop(columns="content_share"), tables[name].drop(columns="content_share")
            )


def test_gap_rows_are_the_percentiles_of_each_controls_resampled_range_by_hand():
    rng = np.random.default_rng(12)
    layer = {name: rng.random((40, 3)) for name in ("same", "null", "content", "content_null")}
    kinds = {
        kind: {"layer": layer[name], "layer_estimate": layer[name].mean(axis=0)}
        for kind, name in (
            ("same_layer", "same"),
            ("null", "null"),
            ("content", "content"),
            ("content_null", "content_null"),
        )
    }
    rows = gap_control_rows(kinds, "p", 0.5)  # not the default 0.95
    differences = {
        "prompt_null": layer["null"],
        "above_null": layer["same"] - layer["null"],
        "content": layer["content"],
        "content_above_null": layer["content"] - layer["content_null"],
    }
    assert [row[1] for row in rows] == [f"delta_s_{name}" for name in differences]
    for row, draws in zip(rows, differences.values(), strict=True):
        low, high = np.quantile(np.ptp(draws, axis=1), [0.25, 0.75])
        assert row[0] == "p" and row[5] == 40 and np.isnan(row[6])
        assert row[2] == pytest.approx(np.ptp(draws.mean(axis=0)), abs=reduction_atol(np.float64, 40))
        assert (row[3], row[4]) == pytest.approx((low, high), abs=reduction_atol(np.float64, 40))


def test_the_content_share_is_float64_and_nan_without_a_share():
    share = np.random.default_rng(4).random((4, 3, 2)).astype(np.float32)
    kinds = {"content": {}}
    attach_content_share(kinds, share)
    assert kinds["content"]["head_share"].dtype == np.float64
    np.testing.assert_array_equal(kinds["content"]["head_share"], share)
    attach_content_share(kinds := {}, share)  # no content variant: nothing to put it beside
    assert kinds == {}
    replicates = np.zeros((5, 3))
    kinds = {
        "same_layer": {"layer": replicates, "layer_estimate": replicates[0]},
        "content": {"layer": replicates, "layer_estimate": replicates[0]},
        "content_null": {"layer": replicates, "layer_estimate": replicates[0]},
    }
    columns = content_columns(kinds, "same_layer", "layer", 0.9)
    assert columns["content_share"].dtype == np.float64 and np.isnan(columns["content_share"]).all()
    kinds["content"]["head_share"] = np.arange(24.0).reshape(4, 3, 2)
    np.testing.assert_array_equal(
        content_columns(kinds, "same_layer", "layer", 0.9)["content_share"], [9.5, 11.5, 13.5]
    )
