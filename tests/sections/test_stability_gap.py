"""headstab.sections.stability_gap: §4.6 stability gap and depth of the extreme layers, and the layer tests with
refits (and architectures) as units."""

import numpy as np
import pandas as pd
import pytest

from headstab.sections.stability_gap import (
    LAYER_TEST_COLUMNS,
    NULL_SOURCES,
    PSEUDO_VALUE_COLUMNS,
    SUMMARY_COLUMNS,
    gap_depth_table,
    layer_pseudo_values,
    layer_tests_table,
    null_source_gaps,
    stability_gap_summary,
    stability_gap_table,
)
from headstab.similarity.prompt_groups import GroupedSimilarity


def test_stability_gap_by_hand(layer_stability):
    stab = layer_stability({1: [0.2, 0.9, 0.5, 0.1], 2: [0.4, 0.4, 0.3, 0.8]})
    stab = stab.sample(frac=1.0, random_state=0)  # row order must not matter
    gap = stability_gap_table(stab, n_layers=4, promptset="primary").set_index("anchor_seed")
    assert gap.loc[1, "delta_s"] == pytest.approx(0.8)
    assert (gap.loc[1, "l_max"], gap.loc[1, "l_min"]) == (2, 4)
    assert (gap.loc[1, "r_max"], gap.loc[1, "r_min"]) == (0.5, 1.0)
    assert gap.loc[2, "delta_s"] == pytest.approx(0.5)
    assert (gap.loc[2, "l_max"], gap.loc[2, "l_min"]) == (4, 3)
    assert gap.loc[2, "r_min"] == 0.75


def test_stability_gap_rejects_missing_layers(layer_stability):
    with pytest.raises(ValueError, match="anchor 1 has layers"):
        stability_gap_table(layer_stability({1: [0.2, 0.9]}), n_layers=3, promptset="primary")


def test_summary_stacks_every_architecture_with_its_facts(layer_stability):
    tables = {
        "l2": pd.concat([layer_stability({1: [0.2, 0.9]}), layer_stability({1: [0.0, 0.0]}, promptset="len5")]),
        "l3_attn_wd": layer_stability({1: [0.5, 0.1, 0.3], 2: [0.1, 0.2, 0.3]}),
    }
    facts = {
        "l2": {"n_layers": 2, "n_heads": 4, "optimizer": "Adam", "attention_only": False},
        "l3_attn_wd": {"n_layers": 3, "n_heads": 4, "optimizer": "AdamW", "attention_only": True},
    }
    summary = stability_gap_summary(tables, facts, promptset="primary")
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert summary["architecture"].tolist() == ["l2", "l3_attn_wd", "l3_attn_wd"]
    assert summary["delta_s"].tolist() == pytest.approx([0.7, 0.4, 0.2])
    assert summary["optimizer"].tolist() == ["Adam", "AdamW", "AdamW"] and summary["attention_only"].tolist() == [
        False,
        True,
        True,
    ]


def test_gap_reads_the_requested_prompt_set_and_same_layer_scope_only(layer_stability):
    stab = pd.concat(
        [
            layer_stability({1: [0.2, 0.9, 0.5]}),
            layer_stability({1: [0.6, 0.1, 0.3]}, scope="cross_layer"),
            layer_stability({1: [0.4, 0.4, 0.0]}, promptset="len5"),
        ]
    )
    assert stability_gap_table(stab, n_layers=3, promptset="primary")["delta_s"].tolist() == pytest.approx([0.7])
    assert stability_gap_table(stab, n_layers=3, promptset="len5")["delta_s"].tolist() == pytest.approx([0.4])
    with pytest.raises(ValueError, match=r"^layer stability has no rows with promptset = 'len9'"):
        stability_gap_table(stab, n_layers=3, promptset="len9")


def test_gap_rows_are_in_anchor_order_whatever_the_row_order(layer_stability):
    stab = layer_stability({3: [0.1, 0.2], 1: [0.5, 0.4], 2: [0.3, 0.3]})
    assert stability_gap_table(stab, n_layers=2, promptset="primary")["anchor_seed"].tolist() == [1, 2, 3]


def test_gap_of_whole_number_stabilities_is_float(layer_stability):
    # Read from a CSV, whole-number means come back as int64; the gap table keeps float columns.
    stab = layer_stability({1: [1, 0, 0]}).astype({"mean": int})
    gap = stability_gap_table(stab, n_layers=3, promptset="primary")
    assert gap[["s_max", "s_min", "delta_s"]].dtypes.tolist() == [np.float64] * 3
    assert (gap.loc[0, "l_max"], gap.loc[0, "l_min"]) == (1, 2)


def test_summary_reads_the_given_prompt_set_and_numbers_its_rows(layer_stability):
    tables = {
        "l2": pd.concat([layer_stability({1: [0.2, 0.9]}), layer_stability({1: [0.5, 0.1]}, promptset="len5")]),
        "l3": pd.concat([layer_stability({1: [0.1, 0.2, 0.3]}, promptset="len5"), layer_stability({1: [0, 0, 1.0]})]),
    }
    facts = {
        "l2": {"n_layers": 2, "n_heads": 4, "optimizer": "Adam", "attention_only": False},
        "l3": {"n_layers": 3, "n_heads": 4, "optimizer": "Adam", "attention_only": False},
    }
    summary = stability_gap_summary(tables, facts, promptset="len5")
    assert summary["delta_s"].tolist() == pytest.approx([0.4, 0.2])
    assert summary.index.tolist() == [0, 1]


def test_null_source_gaps_are_each_columns_range_per_anchor_and_nan_without_it(layer_stability):
    layers = pd.concat(
        [
            layer_stability({1: [0.2, 0.9, 0.5], 2: [0.5, 0.4, 0.3]}).assign(
                null=[0.3, 0.4, 0.1, 0.2, 0.2, 0.2], above_null=[-0.1, 0.5, 0.4, 0.3, 0.2, 0.1]
            ),
            layer_stability({1: [0.0, 0.0, 0.0]}, scope="cross_layer").assign(null=9.0, above_null=9.0),
        ]
    )
    gaps = null_source_gaps(layers.iloc[::-1], "primary").set_index("anchor_seed")
    assert gaps.index.tolist() == [1, 2]  # in anchor order whatever the row order
    assert gaps.loc[1, "delta_s_prompt_null"] == pytest.approx(0.3) and gaps.loc[2, "delta_s_prompt_null"] == 0
    assert gaps.loc[1, "delta_s_above_null"] == pytest.approx(0.6) and gaps.loc[
        2, "delta_s_above_null"
    ] == pytest.approx(0.2)
    assert gaps[["delta_s_content", "delta_s_content_above_null"]].isna().all().all()
    summary = stability_gap_summary({"l3": layers}, {"l3": FACTS_L3}, "primary")
    assert summary["delta_s_prompt_null"].tolist() == pytest.approx([0.3, 0.0])
    other = pd.concat(
        [layers, layer_stability({1: [0.1, 0.2, 0.3]}, promptset="len5").assign(null=[1, 5, 2], above_null=0)]
    )
    len5 = stability_gap_summary({"l3": other}, {"l3": FACTS_L3}, "len5")  # whole numbers, as a CSV gives them
    assert len5["delta_s_prompt_null"].tolist() == [4.0] and len5["delta_s_prompt_null"].dtype == np.float64
    assert null_source_gaps(other, "len5")["delta_s_prompt_null"].dtype == np.float64
    whole = layer_stability({1: [1, 2, 3]}).assign(null=[1, 5, 2], above_null=0)  # every column whole numbers
    gaps = null_source_gaps(whole, "primary")
    assert gaps["delta_s_prompt_null"].tolist() == [4.0] and (gaps.dtypes[list(NULL_SOURCES)] == np.float64).all()
    with pytest.raises(ValueError, match=r"^layer stability has no rows with promptset = 'len9'"):
        null_source_gaps(other, "len9")


FACTS_L3 = {"n_layers": 3, "n_heads": 2, "optimizer": "Adam", "attention_only": True}


def _by_hand_grouped(content: bool = False) -> GroupedSimilarity:
    """3 refits, 1 layer, 2 heads, 2 prompt groups of 1 and 3 prompts. Above the null (0.25 everywhere), the
    pair (a, b) has value x[a, b]: head 0's best match is x + 0.1, head 1's x - 0.1 (the other candidate is
    lower), and the groups' prompt-weighted mean is x (group 0 at x + 0.4, group 1 at x - 0.4 / 3)."""
    x = np.array([[0.0, 0.2, 0.6], [0.4, 0.0, 0.8], [0.6, 1.0, 0.0]]) + 0.25
    block = np.stack([np.stack([x + 0.1, x - 1.0], -1), np.stack([x - 1.0, x - 0.1], -1)], -2)  # [a, b, i, j]
    observed = np.stack([block + 0.4, block - 0.4 / 3])[:, :, :, None]  # [group, a, b, layer, i, j]
    null = np.full_like(observed, 0.25)
    extra = {"content_observed": observed - 0.05, "content_null": null} if content else {}
    return GroupedSimilarity(observed, null, np.array([1, 3]), [4, 5, 6], np.array([1, 0]), np.array([3, 3]), **extra)


def test_pseudo_values_by_hand_from_the_prompt_weighted_best_matches_above_the_null():
    table = layer_pseudo_values(_by_hand_grouped())
    assert list(table.columns) == PSEUDO_VALUE_COLUMNS
    assert table["statistic"].unique().tolist() == ["layer_stability", "layer_above_null"]
    above = table[table["statistic"] == "layer_above_null"]
    # U = 3.6 / 6 = 0.6; without refit 4 the pairs (5, 6), (6, 5) average 0.9, without 5: 0.6, without 6: 0.3;
    # pseudo-value s = 3 U - 2 U_-s
    np.testing.assert_allclose(above["pseudo_value"], [0.0, 0.6, 1.2], atol=1e-6)
    assert above["seed"].tolist() == [4, 5, 6] and (above["layer"] == 0).all() and (above["relative_depth"] == 1).all()
    raw = table[table["statistic"] == "layer_stability"]["pseudo_value"].to_numpy()
    np.testing.assert_allclose(raw, above["pseudo_value"].to_numpy() + 0.25, atol=1e-6)  # the null is 0.25


def test_pseudo_values_of_the_content_variant_and_of_too_few_refits():
    table = layer_pseudo_values(_by_hand_grouped(content=True))
    assert table["statistic"].unique().tolist() == [
        "layer_stability",
        "layer_above_null",
        "layer_stability_content",
        "layer_content_above_null",
    ]
    content = table[table["statistic"] == "layer_content_above_null"]["pseudo_value"]
    np.testing.assert_allclose(content, [-0.05, 0.55, 1.15], atol=1e-6)
    grouped = _by_hand_grouped()
    two = GroupedSimilarity(grouped.observed[:, :2, :2], grouped.null[:, :2, :2], grouped.group_sizes, [4, 5],
                            grouped.partners, grouped.lengths)  # fmt: skip
    table = layer_pseudo_values(two)
    assert len(table) == 4 and table["pseudo_value"].isna().all() and table["seed"].tolist() == [4, 5, 4, 5]


def _planted_grouped(rng, n_refits: int, above: np.ndarray, floors: np.ndarray, spread: float = 0.03):
    """Prompt-group similarity of n_refits refits (3 heads, 2 groups): observed = floors + above + refit-layer
    offsets + symmetric pair noise, null = floors + symmetric pair noise."""
    n_layers = len(floors)
    shape = (2, n_refits, n_refits, n_layers, 3, 3)

    def noise():
        draws = rng.normal(scale=spread, size=shape)
        return (draws + draws.transpose(0, 2, 1, 3, 5, 4)) / np.sqrt(2)

    offsets = rng.normal(scale=0.03, size=(n_refits, n_layers))
    shift = (offsets[:, None] + offsets[None, :])[..., None, None]
    observed = floors[:, None, None] + above[:, None, None] + shift + noise()
    null = floors[:, None, None] + noise()
    seeds = list(range(1, n_refits + 1))
    return GroupedSimilarity(observed, null, np.array([5, 5]), seeds, np.array([1, 0]), np.array([4, 4]))


FACTS_L4 = {"n_layers": 4, "n_heads": 3, "optimizer": "Adam", "attention_only": True}
U_FLOORS = np.array([0.6, 0.3, 0.3, 0.6])  # sharper end layers: a raw dip at chance


def test_a_planted_mid_depth_dip_is_found_at_12_refits_and_chance_floors_alone_are_not():
    rng = np.random.default_rng(8)
    planted = _planted_grouped(rng, 12, np.array([0.2, 0.1, 0.1, 0.2]), np.full(4, 0.3))
    tests = layer_tests_table({"l4": layer_pseudo_values(planted)}, {"l4": FACTS_L4}, 10000, 0)
    row = tests.set_index(["statistic", "test"]).loc[("layer_above_null", "mid_depth_dip")]
    assert row["estimate"] == pytest.approx(0.1, abs=0.03) and row["p_value"] < 0.01
    floors = _planted_grouped(rng, 12, np.full(4, 0.1), U_FLOORS)
    tests = layer_tests_table({"l4": layer_pseudo_values(floors)}, {"l4": FACTS_L4}, 10000, 0)
    tests = tests.set_index(["statistic", "test"])
    assert tests.loc[("layer_stability", "mid_depth_dip"), "estimate"] > 0.2  # the raw dip: the floors'
    assert tests.loc[("layer_above_null", "mid_depth_dip"), "p_value"] > 0.05
    assert tests.loc[("layer_above_null", "layers_differ"), "p_value"] > 0.05


def test_layer_test_rows_test_above_the_null_and_describe_raw_stability():
    rng = np.random.default_rng(9)
    grouped = _planted_grouped(rng, 6, np.array([0.2, 0.1, 0.1, 0.2]), np.full(4, 0.3))
    facts = {"l4": FACTS_L4, "l2": {**FACTS_L4, "n_layers": 2}}
    two_layers = _planted_grouped(rng, 6, np.full(2, 0.1), np.full(2, 0.3))
    tests = layer_tests_table(
        {"l4": layer_pseudo_values(grouped), "l2": layer_pseudo_values(two_layers)}, facts, 100, 0
    )
    assert list(tests.columns) == LAYER_TEST_COLUMNS and len(tests) == 2 * 2 * 2
    # in the order of the architectures and of the pseudo-values' statistics
    assert (
        tests["statistic"].tolist()
        == ["layer_stability"] * 2 + ["layer_above_null"] * 2 + ["layer_stability"] * 2 + ["layer_above_null"] * 2
    )
    assert tests["n_layers"].tolist() == [4] * 4 + [2] * 4 and (tests["n_heads"] == 3).all()
    tests = tests.set_index(["architecture", "statistic", "test"])
    raw = tests.xs(("l4", "layer_stability"), level=("architecture", "statistic"))
    assert raw["p_value"].isna().all() and (raw["calibration"] == "descriptive").all()
    assert raw["note"].str.startswith("raw stability: the layers' chance floors differ").all()
    spread = tests.loc[("l4", "layer_above_null", "layers_differ")]
    assert spread["n_refits"] == 6 and spread["n_signs"] == 64 and spread["min_p"] == pytest.approx(2 / 64)
    assert 0 < spread["chance"] < spread["estimate"] and spread["calibration"] == "calibrated" and spread["note"] == ""
    dip = tests.loc[("l4", "layer_above_null", "mid_depth_dip")]
    assert dip["chance"] == 0 and dip["min_p"] == pytest.approx(1 / 64) and dip["p_value"] == pytest.approx(1 / 64)
    short = tests.loc[("l2", "layer_above_null", "mid_depth_dip")]
    assert np.isnan(short["estimate"]) and np.isnan(short["p_value"]) and np.isnan(short["chance"])
    assert short["note"] == "needs at least 3 layers (two ends and an interior); this architecture has 2"
    # Benjamini-Hochberg within each test over the table's p-values
    differ = tests.xs("layers_differ", level="test")["p_value"].dropna()
    np.testing.assert_allclose(
        tests.xs("layers_differ", level="test")["q_value"].dropna(), stats_bh(differ.to_numpy()), rtol=1e-12
    )


def stats_bh(p: np.ndarray) -> np.ndarray:
    from scipy.stats import false_discovery_control

    return false_discovery_control(p)


def test_layer_tests_of_too_few_refits_are_nan_with_the_reason():
    grouped = _planted_grouped(np.random.default_rng(1), 2, np.full(4, 0.1), np.full(4, 0.3))
    pseudo = layer_pseudo_values(grouped)
    assert pseudo.index.tolist() == list(range(16))  # 2 statistics x 2 refits x 4 layers
    first = pseudo[pseudo["statistic"] == "layer_stability"]
    assert first["layer"].tolist() == [0, 1, 2, 3] * 2 and first["seed"].tolist() == [1] * 4 + [2] * 4
    assert first["relative_depth"].tolist() == [0.25, 0.5, 0.75, 1.0] * 2  # (layer + 1) / L
    tests = layer_tests_table({"l4": pseudo}, {"l4": FACTS_L4}, 100, 0)
    assert tests["estimate"].isna().all() and tests["p_value"].isna().all() and (tests["n_refits"] == 2).all()
    assert tests["test"].tolist() == ["layers_differ", "mid_depth_dip"] * 2 and (tests["n_signs"] == 0).all()
    assert (tests["calibration"] == "descriptive").all() and tests[["chance", "min_p", "q_value"]].isna().all().all()
    assert pseudo["pseudo_value"].dtype == np.float64
    assert (tests["note"] == "per-refit pseudo-values need at least 3 refits; this architecture has 2").all()


def _depth_case(rng, dip_per_layer: float):
    """10 architectures of 3-12 layers (plus one of 2), 5 refits each, the dip dip_per_layer x (L - 3)."""
    pseudo, facts, summary = {}, {}, []
    for k, n_layers in enumerate((12, 2, 3, 4, 6, 8, 3, 4, 6, 8, 12)):
        above = np.full(n_layers, 0.2)
        above[1:-1] -= dip_per_layer * (n_layers - 3)
        name = f"a{k}"
        floors = np.full(n_layers, 0.3)
        floors[[0, -1]] = 0.5  # sharper end layers: the raw dip is 0.2 above the dip above the null
        pseudo[name] = layer_pseudo_values(_planted_grouped(rng, 5, above, floors, spread=0.01))
        facts[name] = {**FACTS_L4, "n_layers": n_layers}
        summary.append({"architecture": name, "n_layers": n_layers, "anchor_seed": 1, "delta_s": 0.01 * n_layers})
    return pd.DataFrame(summary), layer_tests_table(pseudo, facts, 1000, 0)


def test_deeper_models_dipping_more_is_found_and_only_the_dip_is_tested():
    summary, tests = _depth_case(np.random.default_rng(2), 0.03)
    table = gap_depth_table(summary, 999, 0, layer_tests=tests)
    trend = table.drop_duplicates("quantity").set_index("quantity")
    assert set(trend.index) == {"delta_s", "mid_depth_dip", "mid_depth_dip_raw"}
    assert trend.loc["mid_depth_dip", "spearman_rho"] > 0.8 and trend.loc["mid_depth_dip", "p_value"] < 0.01
    assert trend.loc["mid_depth_dip", "calibration"] == "calibrated" and trend.loc["mid_depth_dip", "note"] == ""
    dips = table[table["quantity"] == "mid_depth_dip"]
    assert dips["n_layers"].tolist() == [3, 4, 6, 8, 12] and (dips["n_architectures"] == 2).all()  # no 2-layer dip
    for quantity in ("delta_s", "mid_depth_dip_raw"):
        assert np.isnan(trend.loc[quantity, "p_value"]) and trend.loc[quantity, "calibration"] == "descriptive"
    assert trend.loc["delta_s", "spearman_rho"] == pytest.approx(1.0)  # ranges grow with L: described, not tested
    assert trend.loc["delta_s", "note"].startswith("a range over L layer means grows with L")
    assert trend.loc["mid_depth_dip_raw", "note"].startswith("raw stability: the layers' chance floors differ")
    # per depth: mean and s.d. (ddof 0) over the architectures' dips above the null
    above = tests[(tests["test"] == "mid_depth_dip") & (tests["statistic"] == "layer_above_null")]
    twelve = above[above["n_layers"] == 12]["estimate"].to_numpy()
    row = dips[dips["n_layers"] == 12].iloc[0]
    assert row["mean"] == pytest.approx(twelve.mean()) and row["sd"] == pytest.approx(np.abs(np.diff(twelve))[0] / 2)
    raw = table[(table["quantity"] == "mid_depth_dip_raw") & (table["n_layers"] == 12)]["mean"].iloc[0]
    assert raw == pytest.approx(twelve.mean() + 0.2, abs=0.02)
    assert table[table["quantity"] == "delta_s"]["n_layers"].tolist() == [2, 3, 4, 6, 8, 12]  # the 2-layer range too


def test_a_dip_that_does_not_grow_with_depth_is_not_called_deeper():
    summary, tests = _depth_case(np.random.default_rng(3), 0.0)
    trend = gap_depth_table(summary, 999, 0, layer_tests=tests).drop_duplicates("quantity").set_index("quantity")
    assert trend.loc["mid_depth_dip", "p_value"] > 0.05
    summary, tests = _depth_case(np.random.default_rng(2), 0.03)
    falling = tests.assign(estimate=-tests["estimate"])  # deeper models dip less: one-sided, no evidence
    trend = gap_depth_table(summary, 999, 0, layer_tests=falling).drop_duplicates("quantity").set_index("quantity")
    assert trend.loc["mid_depth_dip", "spearman_rho"] < -0.8 and trend.loc["mid_depth_dip", "p_value"] > 0.99
    alone = gap_depth_table(summary, 999, 0)
    assert set(alone["quantity"]) == {"delta_s"} and alone["p_value"].isna().all()


def test_random_signs_and_orders_repeat_with_the_seed_and_keep_the_architectures_order():
    from headstab.statistics.layer_tests import depth_trend_test

    summary, tests = _depth_case(np.random.default_rng(5), 0.0)
    depth = [gap_depth_table(summary, 99, seed, layer_tests=tests) for seed in (0, 0, 1)]
    p = [table.set_index("quantity").loc["mid_depth_dip", "p_value"].iloc[0] for table in depth]
    assert p[0] == p[1] != p[2]
    above = tests[(tests["test"] == "mid_depth_dip") & (tests["statistic"] == "layer_above_null")]
    expected = depth_trend_test(above["n_layers"], above["estimate"], 99, 0, alternative="greater")["p_value"]
    assert p[0] == expected  # the dips in the order of the summary's architectures
    grouped = _planted_grouped(np.random.default_rng(6), 12, np.full(4, 0.1), np.full(4, 0.3))
    pseudo = {"l4": layer_pseudo_values(grouped)}
    runs = [layer_tests_table(pseudo, {"l4": FACTS_L4}, 100, seed)["p_value"].to_numpy() for seed in (0, 0, 1)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0][np.isfinite(runs[0])], runs[2][np.isfinite(runs[2])])


def test_three_refits_are_enough_and_a_missing_pseudo_value_of_more_is_refused():
    grouped = _planted_grouped(np.random.default_rng(4), 3, np.full(4, 0.1), np.full(4, 0.3))
    pseudo = layer_pseudo_values(grouped)
    tests = layer_tests_table({"l4": pseudo}, {"l4": FACTS_L4}, 100, 0)
    assert tests["estimate"].notna().all() and (tests["n_refits"] == 3).all() and (tests["n_signs"] > 0).sum() == 2
    pseudo.loc[5, "pseudo_value"] = np.nan
    with pytest.raises(ValueError, match=r"pseudo-values must be a finite \[refit, layer\] array"):
        layer_tests_table({"l4": pseudo}, {"l4": FACTS_L4}, 100, 0)
