"""Interval tables: one route to the point estimates, the null and step-0 columns, and the consistency check."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol

from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.stability import stability_tables
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.interval_tables import (
    HEAD_INTERVAL_COLUMNS,
    ONE_TO_ONE,
    POOLED_COLUMNS,
    head_interval_table,
    interval_tables,
    pooled_layer_table,
    replicates_by_kind,
)

SEEDS = [3, 5, 8, 13]
# The columns that compare with chance: the null's and step 0's, defined for same-layer rows only.
CHANCE_COLUMNS = ["null", "null_ci_low", "null_ci_high", "above_null", "above_null_ci_low", "above_null_ci_high"]
CHANCE_COLUMNS += ["effect_size", "init", "init_ci_low", "init_ci_high"]


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
    assert set(tables["gap"]["statistic"]) == {"s_max", "s_min", "delta_s", "r_max", "r_min"} | {
        f"delta_s_{control}" for control in ("prompt_null", "above_null")
    }  # no content variant in these groups: no delta_s_content rows


def test_prompt_groups_from_other_caches_are_refused():
    grouped, pair = grouped_and_pair_tensor(np.random.default_rng(1))
    with pytest.raises(ValueError, match="different caches.*forcerun"):
        interval_tables(pair * 0.9, grouped, "primary", n_boot=10, seed=0, confidence=0.95)


def random_grouped(rng, sizes, n_layers=2, n_heads=3):
    """Symmetric float32 per-group similarities of the refits SEEDS."""
    n = len(SEEDS)
    values = rng.random((len(sizes), n, n, n_layers, n_heads, n_heads)).astype(np.float32)
    return (values + values.transpose(0, 2, 1, 3, 5, 4)) / 2


def pair_tensor_of(observed, sizes):
    """A pair-similarity tensor whose same-layer blocks are the groups' size-weighted mean (cross-layer blocks small)."""
    n, _, n_layers, n_heads = observed.shape[1:5]
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1).astype(np.float32)
    pair = np.full((n, n, n_layers, n_heads, n_layers, n_heads), 0.01, dtype=np.float32)
    for layer in range(n_layers):
        pair[:, :, layer, :, layer, :] = mean[:, :, layer]
    return pair


def cohen_dz(differences, axis):
    return differences.mean(axis=axis) / differences.std(axis=axis, ddof=1)


def quantiles(replicates, confidence):
    alpha = (1 - confidence) / 2
    return np.quantile(replicates, alpha, axis=0), np.quantile(replicates, 1 - alpha, axis=0)


def chance_case(n_boot=40, confidence=0.8):
    """Trained, null and step-0 groups (the step-0 ones of other sizes), the tables, and the replicates by hand."""
    rng = np.random.default_rng(7)
    sizes, init_sizes = np.array([1, 2, 3, 4, 5]), np.array([6, 1, 1, 1, 1])
    observed, null, init = random_grouped(rng, sizes), random_grouped(rng, sizes) * 0.5, random_grouped(rng, sizes)
    lengths = np.full(sizes.sum(), 5)
    partners = np.roll(np.arange(lengths.size), 1)
    grouped = GroupedSimilarity(observed, null, sizes, SEEDS, partners, lengths)
    init_grouped = GroupedSimilarity(init, init, init_sizes, SEEDS, partners, lengths)
    tables = interval_tables(
        pair_tensor_of(observed, sizes), grouped, "p", n_boot=n_boot, seed=3, confidence=confidence, init=init_grouped
    )
    draws = draw_resamples(n_boot, len(SEEDS), len(sizes), 3)
    reps = {
        "same_layer": stability_replicates(draws, observed, sizes),
        "null": stability_replicates(draws, null, sizes),
        "init": stability_replicates(draws, init, init_sizes),
    }
    return tables, reps, confidence


def test_head_table_chance_columns_are_the_paired_null_init_and_effect_size():
    tables, reps, confidence = chance_case()
    head = tables["head"].set_index(["scope", "anchor_seed", "layer", "head"]).loc["same_layer"]
    shape = (len(SEEDS), 2, 3)  # [anchor, layer, head], the table's row order

    def column(name):
        return head[name].to_numpy().reshape(shape)

    atol = reduction_atol(np.float32, 5 + len(SEEDS))  # float32 mixing of 5 groups, then pair sums
    observed, null, init = reps["same_layer"], reps["null"], reps["init"]
    np.testing.assert_allclose(column("null"), null["head_estimate"], atol=atol)
    np.testing.assert_allclose(column("above_null"), observed["head_estimate"] - null["head_estimate"], atol=atol)
    for prefix, replicates in (("", observed["head"]), ("null_", null["head"]), ("init_", init["head"])):
        low, high = quantiles(replicates, confidence)
        np.testing.assert_allclose(column(f"{prefix}ci_low"), low, atol=atol)
        np.testing.assert_allclose(column(f"{prefix}ci_high"), high, atol=atol)
    low, high = quantiles(observed["head"] - null["head"], confidence)
    np.testing.assert_allclose(column("above_null_ci_low"), low, atol=2 * atol)
    np.testing.assert_allclose(column("above_null_ci_high"), high, atol=2 * atol)
    np.testing.assert_allclose(column("init"), init["head_estimate"], atol=atol)
    off = ~np.eye(len(SEEDS), dtype=bool)
    differences = (observed["pair_best"] - null["pair_best"])[off].reshape(len(SEEDS), len(SEEDS) - 1, 2, 3)
    np.testing.assert_allclose(column("effect_size"), cohen_dz(differences, 1), rtol=reduction_rtol(np.float64, 16))
    assert (head["n_boot"] == 40).all() and (head["resampled"] == "refits+prompts").all()
    assert list(head.index.get_level_values("anchor_seed").unique()) == SEEDS


def test_layer_and_pooled_tables_average_the_anchors_heads_and_pairs():
    tables, reps, confidence = chance_case()
    observed, null, init = reps["same_layer"], reps["null"], reps["init"]
    atol = reduction_atol(np.float32, 5 + len(SEEDS) + 3)
    layer = tables["layer"].set_index(["scope", "anchor_seed", "layer"]).loc["same_layer"]
    shape = (len(SEEDS), 2)
    np.testing.assert_allclose(layer["null"].to_numpy().reshape(shape), null["head_estimate"].mean(axis=-1), atol=atol)
    low, high = quantiles(init["head"].mean(axis=-1), confidence)
    np.testing.assert_allclose(layer["init_ci_low"].to_numpy().reshape(shape), low, atol=atol)
    np.testing.assert_allclose(layer["init_ci_high"].to_numpy().reshape(shape), high, atol=atol)
    off = ~np.eye(len(SEEDS), dtype=bool)
    differences = (observed["pair_best"] - null["pair_best"])[off].reshape(len(SEEDS), len(SEEDS) - 1, 2, 3)
    expected = cohen_dz(differences.transpose(0, 2, 1, 3).reshape(len(SEEDS), 2, -1), -1)
    np.testing.assert_allclose(
        layer["effect_size"].to_numpy().reshape(shape), expected, rtol=reduction_rtol(np.float64, 16)
    )

    pooled = tables["pooled"].set_index(["scope", "layer"])
    same = pooled.loc["same_layer"]
    np.testing.assert_allclose(same["stability"], observed["layer_estimate"], atol=atol)
    np.testing.assert_allclose(same["null"], null["layer_estimate"], atol=atol)
    np.testing.assert_allclose(same["init"], init["layer_estimate"], atol=atol)
    low, high = quantiles(observed["layer"] - null["layer"], confidence)
    np.testing.assert_allclose(same["above_null_ci_low"], low, atol=2 * atol)
    np.testing.assert_allclose(same["above_null_ci_high"], high, atol=2 * atol)
    pooled_differences = (observed["pair_best"] - null["pair_best"])[off]  # [pair, layer, head]
    expected = cohen_dz(pooled_differences.transpose(1, 0, 2).reshape(2, -1), -1)
    np.testing.assert_allclose(same["effect_size"], expected, rtol=reduction_rtol(np.float64, 36))
    cross = pooled.loc["cross_layer"]
    assert cross["effect_size"].isna().all() and cross["init"].isna().all() and (cross["resampled"] == "refits").all()
    assert (pooled["n_boot"] == 40).all() and list(tables["pooled"]["promptset"].unique()) == ["p"]
    for name in ("head", "layer", "pooled"):  # one row label per row, as read back from its csv
        assert tables[name].index.equals(pd.RangeIndex(len(tables[name]))), name
    assert (tables["layer"]["n_boot"] == 40).all() and (tables["layer"]["promptset"] == "p").all()


def test_gap_and_commonness_tables_are_intervals_of_their_replicates():
    tables, reps, confidence = chance_case()
    layer = reps["same_layer"]["layer"]  # [boot, layer]
    gap = tables["gap"].set_index("statistic")
    atol = reduction_atol(np.float32, 5 + len(SEEDS) + 3)
    replicates = {
        "s_max": layer.max(axis=1),
        "s_min": layer.min(axis=1),
        "delta_s": layer.max(axis=1) - layer.min(axis=1),
        "r_max": (layer.argmax(axis=1) + 1) / 2,
        "r_min": (layer.argmin(axis=1) + 1) / 2,
    }
    estimate = reps["same_layer"]["layer_estimate"]
    assert gap.loc["delta_s", "estimate"] == pytest.approx(estimate.max() - estimate.min(), abs=2 * atol)
    for statistic, values in replicates.items():
        low, high = quantiles(values, confidence)
        assert gap.loc[statistic, ["ci_low", "ci_high"]].tolist() == pytest.approx([low, high], abs=2 * atol)
    assert (gap["n_boot"] == 40).all() and (gap["promptset"] == "p").all() and gap["p_value"].isna().all()

    rng = np.random.default_rng(7)  # chance_case's trained groups, drawn again
    sizes = np.array([1, 2, 3, 4, 5])
    observed = random_grouped(rng, sizes).astype(np.float64)
    draws = draw_resamples(40, len(SEEDS), len(sizes), 3)
    weights = draws.prompt_counts * sizes / (draws.prompt_counts * sizes).sum(axis=1, keepdims=True)
    # commonness of head (a, l, i): mean over the refit's own heads j of S[a, a, l, i, j]
    per_group = np.stack([observed[:, a, a].mean(axis=-1) for a in range(len(SEEDS))], axis=1)
    low, high = quantiles(np.tensordot(weights, per_group, axes=1), confidence)
    common = tables["commonness"].set_index(["seed", "layer", "head"])
    assert list(common.index.get_level_values("seed").unique()) == SEEDS
    np.testing.assert_allclose(common["ci_low"].to_numpy().reshape(low.shape), low, atol=atol)
    np.testing.assert_allclose(common["ci_high"].to_numpy().reshape(high.shape), high, atol=atol)
    assert (common["n_boot"] == 40).all() and (common["promptset"] == "p").all()


def test_cross_layer_rows_search_every_layer_and_resample_refits_only():
    rng = np.random.default_rng(4)
    sizes = np.array([2, 3])
    observed = random_grouped(rng, sizes)
    lengths = np.full(5, 4)
    grouped = GroupedSimilarity(observed, observed, sizes, SEEDS, np.roll(np.arange(5), 1), lengths)
    pair = pair_tensor_of(observed, sizes)
    pair[:, :, 0, :, 1, :] = rng.random(pair[:, :, 0, :, 1, :].shape) + 0.5  # layer-1 heads outmatch layer 0's
    tables = interval_tables(pair, grouped, "p", n_boot=20, seed=1, confidence=0.9)
    best = np.maximum(pair[:, :, :, :, 0, :].max(axis=-1), pair[:, :, :, :, 1, :].max(axis=-1)).astype(np.float64)
    off = ~np.eye(len(SEEDS), dtype=bool)
    cross = tables["pooled"].set_index(["scope", "layer"]).loc["cross_layer"]
    atol = reduction_atol(np.float64, len(SEEDS) ** 2 * 3)
    np.testing.assert_allclose(cross["stability"], best[off].mean(axis=(0, 2)), atol=atol)
    replicates = stability_replicates(draw_resamples(20, 4, 2, 1), best=best)
    low, high = quantiles(replicates["layer"], 0.9)
    np.testing.assert_allclose(cross["ci_low"], low, atol=atol)
    np.testing.assert_allclose(cross["ci_high"], high, atol=atol)
    assert (cross["n_refits"] == 4).all()
    head = tables["head"].set_index(["scope", "anchor_seed", "layer", "head"]).loc["cross_layer"]
    low, high = quantiles(replicates["head"], 0.9)
    np.testing.assert_allclose(head["ci_low"].to_numpy().reshape(4, 2, 3), low, atol=atol)
    np.testing.assert_allclose(head["ci_high"].to_numpy().reshape(4, 2, 3), high, atol=atol)
    assert head[CHANCE_COLUMNS].isna().all().all() and (head["resampled"] == "refits").all()
    # without step-0 groups the init columns are NaN for every scope
    same = tables["head"][tables["head"]["scope"] == "same_layer"]
    assert same[["init", "init_ci_low", "init_ci_high"]].isna().all().all() and same["null"].notna().all()
    for name in ("head", "layer", "pooled"):  # NaN, not None: the columns stay numeric
        assert (tables[name][CHANCE_COLUMNS].dtypes == np.float64).all(), name


def test_effect_size_is_nan_for_one_pair_or_constant_differences():
    two = SEEDS[:2]
    observed = np.full((2, 2, 2, 1, 2, 2), 0.5, dtype=np.float32)
    observed[:, :, :, :, 0, 1] = observed[:, :, :, :, 1, 0] = 0.75  # every best match is 0.75
    lengths = np.full(4, 3)
    grouped = GroupedSimilarity(observed, observed - 0.25, np.array([2, 2]), two, np.roll(np.arange(4), 1), lengths)
    pair = pair_tensor_of(observed, np.array([2, 2]))
    tables = interval_tables(pair, grouped, "p", n_boot=5, seed=0, confidence=0.9)
    same = tables["head"][tables["head"]["scope"] == "same_layer"]
    assert same["effect_size"].isna().all()  # one pair per anchor: no s.d.
    np.testing.assert_array_equal(same["above_null"], 0.25)
    pooled = tables["pooled"][tables["pooled"]["scope"] == "same_layer"]
    assert pooled["effect_size"].isna().all()  # 2 pairs x 2 heads, all differences 0.25: s.d. 0
    assert same["effect_size"].dtype == np.float64 and pooled["effect_size"].dtype == np.float64


def equal_up_to_rounding_case(spread: float, offset: float = 0.25, noise_ulps: int = 0):
    """Tables of 4 refits whose best matches and null best matches differ by `offset` plus `spread` x (a
    planted pattern of -1 ... 1 over pairs and heads), plus up to `noise_ulps` float32 ulps of symmetric
    noise on the null, each rounded to float32 once, as a file stores them; and the paired differences of the
    stored values [seed_a, seed_b, layer, head]."""
    n = len(SEEDS)
    rng = np.random.default_rng(21)
    best = rng.uniform(0.5, 0.9, size=(n, n, 1, 3))  # float64 truth
    best = (best + best.transpose(1, 0, 2, 3)) / 2
    planted = np.linspace(-1, 1, n * n * 3).reshape(n, n, 1, 3)
    planted = (planted + planted.transpose(1, 0, 2, 3)) / 2
    noise = rng.integers(-noise_ulps, noise_ulps + 1, size=best.shape)
    ulps = (noise + noise.transpose(1, 0, 2, 3)) * np.finfo(np.float32).eps / 2  # ulps of values in [0.5, 1)
    stored = best.astype(np.float32), (best - offset - spread * planted + ulps).astype(np.float32)
    observed, null = np.zeros((2, 1, n, n, 1, 3, 3), dtype=np.float32)
    observed[..., np.arange(3), np.arange(3)], null[..., np.arange(3), np.arange(3)] = stored  # best match: itself
    sizes, lengths = np.array([4]), np.full(4, 5)
    grouped = GroupedSimilarity(observed, null, sizes, SEEDS, np.roll(np.arange(4), 1), lengths)
    tables = interval_tables(pair_tensor_of(observed, sizes), grouped, "p", n_boot=5, seed=0, confidence=0.9)
    return tables, stored[0].astype(np.float64) - stored[1].astype(np.float64)


def test_effect_size_is_nan_for_differences_equal_up_to_float32_rounding():
    tables, differences = equal_up_to_rounding_case(spread=0.0)
    off = ~np.eye(len(SEEDS), dtype=bool)
    assert 0 < differences[off].std() < 1e-7  # rounding alone, which made d_z read 1e5 and more
    for name in ("head", "layer", "pooled"):
        same = tables[name][tables[name]["scope"] == "same_layer"]
        np.testing.assert_allclose(same["above_null"], 0.25, atol=reduction_atol(np.float32, 8))
        assert same["effect_size"].isna().all(), (name, same["effect_size"].tolist())


def test_effect_size_of_a_small_resolvable_spread_is_cohens_dz():
    spread = 1e-3  # about 10^4 float32 ulps of the best matches (0.5-0.9): far above their rounding
    tables, differences = equal_up_to_rounding_case(spread)
    off = ~np.eye(len(SEEDS), dtype=bool)
    pairs = differences[off]  # [pair, layer, head]
    head = tables["head"][tables["head"]["scope"] == "same_layer"]
    expected = cohen_dz(pairs.reshape(len(SEEDS), len(SEEDS) - 1, 1, 3), 1).ravel()
    np.testing.assert_allclose(head["effect_size"], expected, rtol=reduction_rtol(np.float64, 12))
    pooled = tables["pooled"][tables["pooled"]["scope"] == "same_layer"]
    expected = cohen_dz(pairs.transpose(1, 0, 2).reshape(1, -1), -1)
    np.testing.assert_allclose(pooled["effect_size"], expected, rtol=reduction_rtol(np.float64, 36))
    assert np.all(np.abs(pooled["effect_size"]) > 1e2)  # a large effect, and a real one: the spread is planted


def test_effect_size_is_nan_where_the_spread_is_below_a_ten_thousandth_of_the_difference():
    tables, differences = equal_up_to_rounding_case(spread=1e-5)  # d_z about 4 x 10^4: rounding-sized
    off = ~np.eye(len(SEEDS), dtype=bool)
    assert np.abs(cohen_dz(differences[off].reshape(1, -1), -1)).min() > 1e4
    for name in ("head", "layer", "pooled"):
        same = tables[name][tables[name]["scope"] == "same_layer"]
        assert same["effect_size"].isna().all(), (name, same["effect_size"].tolist())


def test_effect_size_of_a_positional_head_at_its_null_up_to_accumulated_rounding_is_nan():
    # best match and null best match equal but for a few float32 ulps, as cosines summed over the 15
    # lower-triangle entries of 5-token prompts round: no mean to divide, and no spread to divide it by
    tables, differences = equal_up_to_rounding_case(spread=0.0, offset=0.0, noise_ulps=3)
    off = ~np.eye(len(SEEDS), dtype=bool)
    assert 0 < differences[off].std() and np.abs(differences[off]).max() < 1e-6
    for name in ("head", "layer", "pooled"):
        same = tables[name][tables[name]["scope"] == "same_layer"]
        assert same["effect_size"].isna().all(), (name, same["effect_size"].tolist())


def test_effect_size_of_two_pairs_per_anchor_is_cohens_dz():
    seeds = SEEDS[:3]
    rng = np.random.default_rng(6)
    sizes = np.array([1, 2])
    observed = rng.random((2, 3, 3, 1, 2, 2)).astype(np.float32)
    observed = (observed + observed.transpose(0, 2, 1, 3, 5, 4)) / 2
    partners = np.roll(np.arange(3), 1)
    grouped = GroupedSimilarity(observed, observed * 0.5, sizes, seeds, partners, np.full(3, 4))
    tables = interval_tables(pair_tensor_of(observed, sizes), grouped, "p", n_boot=5, seed=0, confidence=0.9)
    best = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1).max(axis=-1)
    differences = 0.5 * best[~np.eye(3, dtype=bool)].reshape(3, 2, 1, 2)  # observed - null, two pairs per anchor
    same = tables["head"][tables["head"]["scope"] == "same_layer"]
    expected = cohen_dz(differences, 1).ravel()
    np.testing.assert_allclose(same["effect_size"], expected, rtol=reduction_rtol(np.float32, 2 + 3))


def test_step0_replicates_default_to_the_trained_group_sizes():
    rng = np.random.default_rng(8)
    sizes = np.array([3, 1, 2])
    observed, init = random_grouped(rng, sizes), random_grouped(rng, sizes)
    draws = draw_resamples(6, len(SEEDS), 3, 2)
    best = observed.max(axis=(0, -1)).astype(np.float64)
    kinds = replicates_by_kind(draws, observed, observed, sizes, best, init=init)
    np.testing.assert_array_equal(kinds["init"]["layer"], stability_replicates(draws, init, sizes)["layer"])


def test_step0_groups_of_other_seeds_and_mismatched_tensors_are_refused_with_the_details():
    grouped, pair = grouped_and_pair_tensor(np.random.default_rng(1))
    other = GroupedSimilarity(
        grouped.observed, grouped.null, grouped.group_sizes, [3, 5, 8, 21], grouped.partners, grouped.lengths
    )
    with pytest.raises(
        ValueError, match=r"step-0 prompt groups cover seeds \[3, 5, 8, 21\], the trained refits \[3, 5, 8, 13\]"
    ):
        interval_tables(pair, grouped, "primary", n_boot=10, seed=0, confidence=0.95, init=other)
    moved = pair.copy()
    moved[0, 1, 1, 2, 1, :] += np.float32(0.125)  # one head's block, so its best match, 0.125 higher
    hint = r"Rebuild both \(snakemake --forcerun pair_similarity prompt_group_similarity\)$"
    with pytest.raises(ValueError, match=rf"prompt set 'primary'.*differ by up to 0\.125.*{hint}"):
        interval_tables(moved, grouped, "primary", n_boot=10, seed=0, confidence=0.95)


def test_jackknife_columns_and_calibration_labels_sit_beside_each_tables_intervals():
    from headstab.statistics.calibration import calibration_label
    from headstab.statistics.jackknife import JACKKNIFE_COLUMNS, jackknife_columns

    tables, reps, _ = chance_case(confidence=0.9)
    rng = np.random.default_rng(7)  # chance_case's draws, in its order
    sizes = np.array([1, 2, 3, 4, 5])
    observed, null = random_grouped(rng, sizes), random_grouped(rng, sizes) * 0.5
    grouped = GroupedSimilarity(observed, null, sizes, SEEDS, np.zeros(15, int), np.full(15, 5))
    best = {"observed": reps["same_layer"]["pair_best"], "null": reps["null"]["pair_best"]}
    expected = jackknife_columns(grouped, best, 0.9)
    for level, key in (("head", "head"), ("layer", "layer"), ("pooled", "pooled")):
        table = tables[level]
        same, cross = table[table["scope"] == "same_layer"], table[table["scope"] == "cross_layer"]
        for column in JACKKNIFE_COLUMNS:
            np.testing.assert_allclose(
                same[column], np.ravel(expected[key][column]), atol=reduction_atol(np.float32, 5)
            )
            assert cross[column].isna().all()
        method = {"head": "anchor_head", "layer": "anchor_layer", "pooled": "pooled"}[level]
        assert set(same["ci_calibration"]) == {calibration_label(f"multibootstrap_{method}", 4)}
        assert set(same["jackknife_calibration"]) == {calibration_label(f"jackknife_{method}", 4)}
        expected_above = calibration_label(f"jackknife_above_null_{method}", 4)
        assert set(same["above_null_jackknife_calibration"]) == {expected_above}
        assert set(cross["ci_calibration"]) == {calibration_label("multibootstrap_cross_layer", 4)}
        assert set(same["init_ci_calibration"]) == {calibration_label("multibootstrap_init", 4)}
        assert cross["null_ci_calibration"].isna().all() and cross["jackknife_calibration"].isna().all()
    gap = tables["gap"].set_index("statistic")
    assert gap.loc["delta_s", "ci_calibration"] == calibration_label("multibootstrap_gap", 4)
    assert gap["ci_calibration"].notna().all() and gap["p_calibration"].isna().all()  # no p-value in the gap rows


def controls_case(permutations=None, seed=3):
    """chance_case's groups with entropy, the content variant and its share, and a pair-similarity null."""
    rng = np.random.default_rng(11)
    sizes = np.array([1, 2, 3, 4, 5])
    observed, null = random_grouped(rng, sizes), random_grouped(rng, sizes) * 0.5
    content, content_null = random_grouped(rng, sizes) * 0.3, random_grouped(rng, sizes) * 0.1
    lengths = np.full(sizes.sum(), 5)
    n = len(SEEDS)
    grouped = GroupedSimilarity(
        observed, null, sizes, SEEDS, np.roll(np.arange(lengths.size), 1), lengths,
        entropy=rng.random((n, 2, 3)), content_observed=content, content_null=content_null,
        content_share=rng.random((n, 2, 3)),
    )  # fmt: skip
    s0 = rng.random((n, n, 2, 3, 2, 3)).astype(np.float32) * 0.2
    s0 = (s0 + s0.transpose(1, 0, 4, 5, 2, 3)) / 2
    options = {} if permutations is None else {"permutations": permutations}
    tables = interval_tables(pair_tensor_of(observed, sizes), grouped, "p", n_boot=30, seed=seed, confidence=0.8,
                             null_similarity=(s0, grouped.partners), **options)  # fmt: skip
    draws = draw_resamples(30, n, len(sizes), seed)
    reps = {name: stability_replicates(draws, values, sizes) for name, values in
            (("content", content), ("content_null", content_null))}  # fmt: skip
    return tables, reps, grouped


def test_entropy_content_and_its_share_follow_each_tables_level():
    tables, reps, grouped = controls_case(permutations=5)
    atol = reduction_atol(np.float32, 15)
    head, layer, pooled = (tables[k] for k in ("head", "layer", "pooled"))
    for table, reduce, key in ((head, (), "head"), (layer, (2,), "layer"), (pooled, (0, 2), "layer")):
        same, cross = table[table["scope"] == "same_layer"], table[table["scope"] == "cross_layer"]
        np.testing.assert_allclose(same["entropy"], np.ravel(grouped.entropy.mean(axis=reduce)), rtol=1e-12)
        np.testing.assert_allclose(same["content_share"], np.ravel(grouped.content_share.mean(axis=reduce)), rtol=1e-12)
        estimate = {"content": reps["content"], "content_null": reps["content_null"]}
        if table is layer:  # per anchor: the mean over its heads
            estimate = {
                k: {"est": v["head_estimate"].mean(-1), "reps": v["head"].mean(-1)} for k, v in estimate.items()
            }
        else:
            estimate = {k: {"est": v[f"{key}_estimate"], "reps": v[key]} for k, v in estimate.items()}
        content, null = estimate["content"], estimate["content_null"]
        np.testing.assert_allclose(same["stability_content"], np.ravel(content["est"]), atol=atol)
        np.testing.assert_allclose(same["stability_content_null"], np.ravel(null["est"]), atol=atol)
        low, high = quantiles(content["reps"] - null["reps"], 0.8)
        np.testing.assert_allclose(same["stability_content_above_null_ci_low"], np.ravel(low), atol=2 * atol)
        np.testing.assert_allclose(same["stability_content_above_null_ci_high"], np.ravel(high), atol=2 * atol)
        assert cross["stability_content"].isna().all() and cross["content_share"].isna().all()
    gap = tables["gap"].set_index("statistic")
    assert {"delta_s_content", "delta_s_content_above_null"} <= set(gap.index)
    assert list(tables["gap"].index) == list(range(len(tables["gap"])))


def test_the_cross_layer_null_is_tested_with_the_permutations_and_seed_given():
    tables, _, _ = controls_case(permutations=5)  # 3 partners: 8 sign vectors > 5, drawn at random
    again, _, _ = controls_case(permutations=5)
    for level in ("head", "layer"):
        cross = tables[level][tables[level]["scope"] == "cross_layer"]
        assert cross["p_value"].notna().all() and cross["null"].notna().all()
        assert set(np.round(cross["p_value"] * 6, 9)) <= set(range(1, 7))  # (1 + extreme) / (1 + 5)
        pd.testing.assert_frame_equal(tables[level], again[level])


def test_one_to_one_columns_are_same_layer_only_and_nan_without_assignments():
    from headstab.matching import one_to_one_assignment

    tables, _, _ = chance_case()
    for level in ("head", "layer", "pooled"):
        table = tables[level]
        same, cross = table[table["scope"] == "same_layer"], table[table["scope"] == "cross_layer"]
        assert cross[ONE_TO_ONE].isna().all().all()
        # the one-to-one partner is never better than the best match: each kind's value is at most its best-match one
        for column, best in (("one_to_one_null", "null"), ("one_to_one_init", "init")):
            assert same[column].notna().all() and (same[column] <= same[best] + 1e-6).all(), (level, column)
    pooled = tables["pooled"]
    assert pooled.loc[pooled["scope"] == "cross_layer", "stability_one_to_one"].isna().all()
    rng = np.random.default_rng(7)
    sizes = np.array([1, 2, 3, 4, 5])
    observed, null = random_grouped(rng, sizes), random_grouped(rng, sizes) * 0.5
    draws = draw_resamples(10, len(SEEDS), len(sizes), 0)
    best = pair_tensor_of(observed, sizes).reshape(4, 4, 2, 3, -1).max(axis=-1)
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1)
    assignment = {"one_to_one": one_to_one_assignment(mean), "one_to_one_null": one_to_one_assignment(mean * 0.5)}
    kinds = replicates_by_kind(draws, observed, null, sizes, best, assignments=assignment)
    pooled = pooled_layer_table(kinds, "p", 0.8, 1e-7)
    same = pooled[pooled["scope"] == "same_layer"]
    np.testing.assert_allclose(same["stability_one_to_one"], kinds["one_to_one"]["layer_estimate"], rtol=1e-12)
    bare = replicates_by_kind(draws, observed, null, sizes, best)
    for table in (pooled_layer_table(bare, "p", 0.8, 1e-7), head_interval_table(bare, SEEDS, "p", 0.8, 1e-7)):
        columns = [*ONE_TO_ONE, *(["stability_one_to_one"] if "stability_one_to_one" in table else [])]
        assert table[columns].dtypes.eq(np.float64).all() and table[columns].isna().all().all()


def test_the_gap_rows_are_labelled_at_the_number_of_refits(monkeypatch):
    import dataclasses

    from headstab.statistics import calibration

    methods = dict(calibration.METHODS)
    methods["multibootstrap_gap"] = dataclasses.replace(methods["multibootstrap_gap"], min_n=4)
    monkeypatch.setattr(calibration, "METHODS", methods)
    gap = chance_case()[0]["gap"].set_index("statistic")
    assert gap.loc["delta_s", "ci_calibration"] == "calibrated"  # 4 refits, calibrated from 4 on
