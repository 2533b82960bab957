"""headstab.sections.stability_commonness: "least stable yet most distinct" tested over refits, given entropy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.sections.stability_commonness import (
    STABILITY_COMMONNESS_COLUMNS,
    joint_test,
    refit_correlations,
    refit_layer_values,
    stability_commonness_summary,
    stability_commonness_table,
)

N_HEADS = 3
ATOL = reduction_atol(np.float64, 16)


def tables_of(stability, commonness, entropy, seeds=None, promptset="primary"):
    """layer_stability.csv and commonness.csv rows of [refit, layer] values: the commonness of a layer's heads
    spread around the layer's value (mean exact), a cross-layer scope and another prompt set as decoys."""
    stability, commonness, entropy = (np.asarray(v, dtype=np.float64) for v in (stability, commonness, entropy))
    n_refits, n_layers = stability.shape
    seeds = list(range(10, 10 + n_refits)) if seeds is None else seeds
    anchor, layer = np.indices((n_refits, n_layers))
    layers = pd.DataFrame(
        {
            "promptset": promptset,
            "scope": "same_layer",
            "anchor_seed": np.asarray(seeds)[anchor.ravel()],
            "layer": layer.ravel(),
            "above_null": stability.ravel(),
            "entropy": entropy.ravel(),
        }
    )
    decoys = [layers.assign(scope="cross_layer", above_null=9.0), layers.assign(promptset="len5", above_null=-9.0)]
    spread = np.array([-0.1, 0.0, 0.1])
    seed, layer, head = np.indices((n_refits, n_layers, N_HEADS))
    heads = pd.DataFrame(
        {
            "promptset": promptset,
            "seed": np.asarray(seeds)[seed.ravel()],
            "layer": layer.ravel(),
            "head": head.ravel(),
            "commonness_excl_self_above_null": (commonness[..., None] + spread).ravel(),
        }
    )
    head_decoy = heads.assign(promptset="len5", commonness_excl_self_above_null=5.0)
    return pd.concat([*decoys, layers]).sample(frac=1, random_state=1), pd.concat([head_decoy, heads])


# Over 4 layers: z = 0, 1, 2, 3; u and v are orthogonal to each other, to the constant and to z.
Z = np.array([0.0, 1.0, 2.0, 3.0])
U = np.array([1.0, -1.0, -1.0, 1.0])
V = np.array([1.0, -3.0, 3.0, -1.0])


def test_correlations_over_layers_by_hand():
    # x = z + u, y = z + v: r = z.z / sqrt((z.z + u.u)(z.z + v.v)) = 5 / sqrt(9 x 25); given z, r(u, v) = 0
    x = np.stack([Z + U, Z + U, Z + U, Z + U])
    y = np.stack([Z + V, Z + 2 * U, Z - U, Z + V])
    z = np.stack([Z, Z, Z, np.full(4, np.nan)])
    result = refit_correlations(x, y, z)
    np.testing.assert_allclose(result["r"], [1 / 3, (5 + 8) / np.sqrt(9 * 21), 1 / 9, 1 / 3], atol=ATOL)
    np.testing.assert_allclose(result["partial_r"][:3], [0.0, 1.0, -1.0], atol=ATOL)
    assert np.isnan(result["partial_r"][3])  # no entropy


@pytest.mark.filterwarnings("error")  # NaN by rule, not by a 0 / 0 that warns
def test_too_few_layers_or_a_constant_give_nan():
    three = refit_correlations(np.array([[0.1, 0.5, 0.2]]), np.array([[0.3, 0.1, 0.2]]), np.array([[0.5, 0.6, 0.7]]))
    assert np.isfinite(three["r"]).all() and np.isnan(three["partial_r"]).all()  # r from 3 layers, partial from 4
    two = refit_correlations(np.array([[0.1, 0.5]]), np.array([[0.3, 0.1]]), np.array([[0.5, 0.6]]))
    assert np.isnan(two["r"]).all() and np.isnan(two["partial_r"]).all()
    flat = refit_correlations(np.stack([Z + U, Z + U]), np.stack([np.full(4, 0.2), Z + V]), np.stack([Z, Z]))
    assert np.isnan(flat["r"][0]) and np.isnan(flat["partial_r"][0]) and np.isfinite(flat["partial_r"][1])
    missing = refit_correlations(np.stack([Z + U, Z + U]), np.stack([[0.1, np.nan, 0.2, 0.3], Z + V]), np.stack([Z, Z]))
    assert np.isnan(missing["r"][0]) and np.isnan(missing["partial_r"][0])
    np.testing.assert_allclose([missing["r"][1], missing["partial_r"][1]], [1 / 3, 0.0], atol=ATOL)


@pytest.mark.filterwarnings("error")  # no mean of an empty selection
def test_joint_test_enumerates_every_sign_vector_by_hand():
    # sum 1.0 of (0.5, 0.2, -0.1, 0.4); flipping a set S gives 1.2 - 2 sum|S|, at least 1.0 for S = {} or {0.1}
    result = joint_test(np.array([0.5, 0.2, -0.1, 0.4, np.nan]), n_permutations=1000, seed=0)
    assert result["p_value"] == pytest.approx(2 / 16) and result["min_p"] == 1 / 16
    assert result["mean_partial_r"] == pytest.approx(0.25) and result["n_positive"] == 3 and result["n_used"] == 4
    negative = joint_test(np.array([-0.5, -0.2, 0.1, -0.4]), n_permutations=1000, seed=0)
    assert negative["p_value"] == pytest.approx(15 / 16)  # one-sided: a negative association is no evidence
    sampled = joint_test(np.full(12, 0.3), n_permutations=999, seed=0)  # 2^12 > 999: random sign vectors
    assert sampled["min_p"] == 1 / 1000 and sampled["p_value"] == pytest.approx(1 / 1000)
    one = joint_test(np.array([0.4, np.nan]), n_permutations=100, seed=0)
    assert np.isnan(one["p_value"]) and np.isnan(one["min_p"]) and one["mean_partial_r"] == 0.4
    assert np.isnan(joint_test(np.array([np.nan]), 100, 0)["mean_partial_r"])
    listed = joint_test([0.5, None, 0.2, -0.1, 0.4], n_permutations=1000, seed=0)  # None: missing
    assert listed["p_value"] == pytest.approx(2 / 16) and listed["n_used"] == 4
    with pytest.raises(ValueError, match="'statistics.permutations' must be >= 1; got 0"):
        joint_test(np.array([0.1, 0.2]), n_permutations=0, seed=0)


def test_joint_test_switches_to_random_sign_vectors_above_the_permutation_budget():
    values = np.array([0.5, 0.2, -0.1, 0.4])
    exact = joint_test(values, n_permutations=16, seed=0)  # 2^4 = 16 sign vectors: all of them
    assert exact["min_p"] == 1 / 16 and exact["p_value"] == pytest.approx(2 / 16)
    sampled = joint_test(values, n_permutations=15, seed=0)
    assert sampled["min_p"] == 1 / 16  # 1 / (1 + 15) random sign vectors
    one = joint_test(values, n_permutations=1, seed=0)
    assert one["min_p"] == 1 / 2 and one["p_value"] in (0.5, 1.0)
    rng = np.random.default_rng(2)
    noisy = rng.normal(0.1, 0.5, size=14)
    first, again = (joint_test(noisy, 200, seed=3)["p_value"] for _ in range(2))
    assert first == again and joint_test(noisy, 200, seed=4)["p_value"] != first  # seeded sign vectors
    assert joint_test(np.array([0.0, 0.2, -0.1]), 100, 0)["n_positive"] == 1  # 0 is not positive


def _planted(rng, n_refits, effect, n_layers=8, confound=0.0, refit_confound=0.0):
    """[refit, layer] stability and commonness above null and entropy. A shared mid-depth dip of size `effect`
    in both; refit-specific layer offsets of mean zero over refits, sharper and broader layers; `confound`: a
    refit's sharper layer lowers both; `refit_confound`: a refit sharper at every layer lowers both."""
    depth = np.linspace(0, 1, n_layers)
    dip = -np.sin(np.pi * depth)  # least stable and least common at mid-depth
    spread = np.linspace(0.02, 0.06, n_layers)  # broader deep layers
    entropy = 0.6 + 0.1 * depth + rng.normal(scale=0.05, size=(n_refits, n_layers))
    entropy -= entropy.mean(axis=0) - (0.6 + 0.1 * depth)  # the offsets have mean zero over refits
    refit = rng.normal(scale=0.05, size=(n_refits, 1))
    shared = confound * entropy + refit_confound * refit
    stability = effect * dip + shared + rng.normal(size=(n_refits, n_layers)) * spread
    commonness = effect * dip + shared + rng.normal(size=(n_refits, n_layers)) * spread
    return stability, commonness, entropy


def _table(rng, n_refits, effect, **planted):
    layers, heads = tables_of(*_planted(rng, n_refits, effect, **planted))
    return stability_commonness_table(layers, heads, "primary", 999, int(rng.integers(2**31)))


def test_a_planted_positive_association_over_8_layers_is_found_at_12_refits():
    rng = np.random.default_rng(5)
    tables = [_table(rng, 12, effect=0.1) for _ in range(40)]
    rejected = np.mean([t["p_value"].iloc[0] <= 0.05 for t in tables])
    assert rejected >= 0.9
    assert all((t["calibration"] == "calibrated").all() and (t["n_refits"] == 12).all() for t in tables)


def _null_p_values(seed, reps=200, **planted):
    rng = np.random.default_rng(seed)
    tables = [_table(rng, 12, effect=0.0, **planted) for _ in range(reps)]
    return np.array([t["p_value"].iloc[0] for t in tables]), np.array([t["mean_r"].iloc[0] for t in tables])


def test_the_tables_p_value_is_the_seeded_test_of_its_refits_partial_r():
    rng = np.random.default_rng(11)
    layers, heads = tables_of(*_planted(rng, 12, 0.02))
    table = stability_commonness_table(layers, heads, "primary", 300, seed=5)  # 2^12 > 300: random signs
    expected = joint_test(table["partial_r"].to_numpy(), 300, seed=5)
    assert (table["p_value"] == expected["p_value"]).all() and (table["min_p"] == 1 / 301).all()
    np.testing.assert_allclose(table["mean_partial_r"], expected["mean_partial_r"], rtol=1e-15)


def test_without_association_the_p_values_are_uniform():
    p_values, _ = _null_p_values(6)
    bound = 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(p_values))
    assert np.mean(p_values <= 0.05) <= bound
    assert np.mean(p_values) == pytest.approx(0.5, abs=0.07)
    assert np.mean(p_values <= 0.5) == pytest.approx(0.5, abs=0.12)


def test_a_refits_sharper_layers_lowering_both_are_partialled_out():
    # raw r is strongly positive (what a test without entropy would read); given entropy, no association
    p_values, mean_r = _null_p_values(7, reps=150, confound=-1.5)
    assert np.median(mean_r) > 0.5
    assert np.mean(p_values <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(p_values))


def test_a_refit_sharper_at_every_layer_is_no_association_over_layers():
    # pooling every refit's layers as independent points would read the refits' spread as a correlation
    rng = np.random.default_rng(8)
    stability, commonness, entropy = _planted(rng, 12, 0.0, refit_confound=4.0)
    pooled = np.corrcoef(stability.ravel(), commonness.ravel())[0, 1]
    assert pooled > 0.5
    p_values, _ = _null_p_values(9, reps=150, refit_confound=4.0)
    assert np.mean(p_values <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(p_values))


@pytest.mark.filterwarnings("error")  # no mean of an empty selection
def test_table_reads_the_same_layer_rows_of_the_prompt_set_and_says_why_a_p_value_is_nan():
    x, y = np.stack([Z + U, Z + U]), np.stack([Z + V, Z + 2 * U])
    layers, heads = tables_of(x, y, np.stack([Z, Z]), seeds=[7, 3])
    table = stability_commonness_table(layers, heads, "primary", 1000, 0)
    assert list(table.columns) == STABILITY_COMMONNESS_COLUMNS and list(table["seed"]) == [3, 7]
    np.testing.assert_allclose(table["partial_r"], [1.0, 0.0], atol=ATOL)  # seeds sorted: 3 first
    np.testing.assert_allclose(table["mean_r"], (1 / 3 + 13 / np.sqrt(189)) / 2, atol=ATOL)
    assert (table["p_value"] == 0.5).all() and (table["min_p"] == 0.25).all() and (table["n_positive"] == 1).all()
    assert (table["calibration"] == "descriptive").all() and (table["reason"] == "").all()
    assert (table["alternative"] == "greater").all() and (table["n_layers"] == 4).all()
    three = stability_commonness_table(*tables_of(x[:, :3], y[:, :3], np.stack([Z, Z])[:, :3]), "primary", 100, 0)
    assert three["p_value"].isna().all() and three["partial_r"].isna().all() and three["r"].notna().all()
    assert (three["reason"] == "3 layers: a partial correlation over layers needs at least 4").all()
    no_entropy = stability_commonness_table(*tables_of(x, y, np.full((2, 4), np.nan)), "primary", 100, 0)
    assert no_entropy["reason"].str.startswith("no head entropy in the prompt groups").all()
    partial = np.stack([Z, np.full(4, np.nan)])  # one refit without entropy: the other is tested alone
    one_left = stability_commonness_table(*tables_of(x, y, partial), "primary", 100, 0)
    assert (one_left["reason"] == "1 refits with a defined partial r: the sign-flip test needs at least 2").all()
    two = stability_commonness_table(*tables_of(x[:, :2], y[:, :2], np.stack([Z, Z])[:, :2]), "primary", 100, 0)
    assert two[["r", "partial_r", "mean_r", "mean_partial_r", "p_value"]].isna().all().all()
    assert (two["reason"] == "2 layers: a partial correlation over layers needs at least 4").all()
    one_head = heads.assign(commonness_excl_self_above_null=np.nan)  # one-head layers: no peers
    no_peers = stability_commonness_table(layers, one_head, "primary", 100, 0)
    assert no_peers[["r", "partial_r", "p_value"]].isna().all().all() and len(no_peers) == 2
    single = stability_commonness_table(*tables_of(x[:1], y[:1], np.stack([Z])), "primary", 100, 0)
    assert (single["reason"] == "1 refits with a defined partial r: the sign-flip test needs at least 2").all()
    assert (single["n_refits"] == 1).all() and (single["calibration"] == "descriptive").all()


def test_missing_columns_and_refits_name_the_table_and_the_fix():
    layers, heads = tables_of(np.stack([Z + U, Z]), np.stack([Z + V, Z]), np.stack([Z, Z]))
    with pytest.raises(ValueError, match=r"layer_stability.csv lacks columns \['entropy'\]; rebuild it with"):
        refit_layer_values(layers.drop(columns="entropy"), heads, "primary")
    with pytest.raises(ValueError, match=r"commonness.csv lacks columns \['commonness_excl_self_above_null'\]"):
        refit_layer_values(layers, heads.drop(columns="commonness_excl_self_above_null"), "primary")
    with pytest.raises(ValueError, match="layer_stability.csv has no same-layer rows of prompt set 'len9'"):
        refit_layer_values(layers, heads, "len9")
    with pytest.raises(ValueError, match=r"covers refits \[10, 11\] and layers 0-3, commonness.csv refits \[10\]"):
        refit_layer_values(layers, heads[heads["seed"] == 10], "primary")
    with pytest.raises(ValueError, match=r"commonness.csv refits \[10, 11\] and layers \[0, 1, 2\]"):
        refit_layer_values(layers, heads[heads["layer"] < 3], "primary")
    seeds, values = refit_layer_values(layers, heads, "primary")
    assert seeds == [10, 11]
    np.testing.assert_allclose(values["commonness"], np.stack([Z + V, Z]), atol=ATOL)  # the heads' mean
    np.testing.assert_array_equal(values["stability"], np.stack([Z + U, Z]))
    np.testing.assert_array_equal(values["entropy"], np.stack([Z, Z]))


def test_summary_has_one_test_per_architecture_with_benjamini_hochberg_q_values():
    rng = np.random.default_rng(3)
    layers, heads = tables_of(*_planted(rng, 5, 0.0))
    base = stability_commonness_table(layers, heads, "primary", 1000, 0)
    tables = {
        "a": base.assign(p_value=0.01),
        "b": base.assign(p_value=0.04),
        "c": base.assign(p_value=np.nan, reason="2 layers"),
        "d": base.assign(p_value=0.03),
    }
    summary = stability_commonness_summary(tables)
    assert list(summary["architecture"]) == ["a", "b", "c", "d"] and (summary["promptset"] == "primary").all()
    # Benjamini-Hochberg of (0.01, 0.04, 0.03): 0.03 for the smallest (3 x 0.01 / 1 = 0.03, min with 0.04 x 3 / 3)
    np.testing.assert_allclose(summary["q_value"], [0.03, 0.04, np.nan, 0.04])
    assert list(summary.columns[:2]) == ["architecture", "promptset"] and "seed" not in summary.columns
    assert summary.columns.get_loc("q_value") == summary.columns.get_loc("p_value") + 1
    assert summary.index.equals(pd.RangeIndex(4))
    empty = stability_commonness_summary({})
    assert empty.empty and "q_value" in empty.columns
