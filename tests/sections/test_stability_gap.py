"""headstab.sections.stability_gap: §4.6 stability gap and depth of the extreme layers."""

import numpy as np
import pandas as pd
import pytest

from headstab.sections.stability_gap import SUMMARY_COLUMNS, stability_gap_summary, stability_gap_table


def test_stability_gap_by_hand(layer_stability):
    stab = layer_stability({1: [0.2, 0.9, 0.5, 0.1], 2: [0.4, 0.4, 0.3, 0.8]})
    stab = stab.sample(frac=1.0, random_state=0)  # row order must not matter
    gap = stability_gap_table(stab, n_layers=4).set_index("anchor_seed")
    assert gap.loc[1, "delta_s"] == pytest.approx(0.8)
    assert (gap.loc[1, "l_max"], gap.loc[1, "l_min"]) == (2, 4)
    assert (gap.loc[1, "r_max"], gap.loc[1, "r_min"]) == (0.5, 1.0)
    assert gap.loc[2, "delta_s"] == pytest.approx(0.5)
    assert (gap.loc[2, "l_max"], gap.loc[2, "l_min"]) == (4, 3)
    assert gap.loc[2, "r_min"] == 0.75


def test_stability_gap_rejects_missing_layers(layer_stability):
    with pytest.raises(ValueError, match="anchor 1 has layers"):
        stability_gap_table(layer_stability({1: [0.2, 0.9]}), n_layers=3)


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
    assert stability_gap_table(stab, n_layers=3)["delta_s"].tolist() == pytest.approx([0.7])
    assert stability_gap_table(stab, n_layers=3, promptset="len5")["delta_s"].tolist() == pytest.approx([0.4])
    with pytest.raises(ValueError, match=r"^layer stability has no rows with promptset = 'len9'"):
        stability_gap_table(stab, n_layers=3, promptset="len9")


def test_gap_rows_are_in_anchor_order_whatever_the_row_order(layer_stability):
    stab = layer_stability({3: [0.1, 0.2], 1: [0.5, 0.4], 2: [0.3, 0.3]})
    assert stability_gap_table(stab, n_layers=2)["anchor_seed"].tolist() == [1, 2, 3]


def test_gap_of_whole_number_stabilities_is_float(layer_stability):
    # Read from a CSV, whole-number means come back as int64; the gap table keeps float columns.
    stab = layer_stability({1: [1, 0, 0]}).astype({"mean": int})
    gap = stability_gap_table(stab, n_layers=3)
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


def head_table(values_by_anchor, promptset="primary"):
    """{anchor: [layer][head] stabilities} -> head_stability rows (same-layer scope)."""
    rows = [
        (promptset, "same_layer", anchor, layer, head, value)
        for anchor, values in values_by_anchor.items()
        for layer, heads in enumerate(values)
        for head, value in enumerate(heads)
    ]
    return pd.DataFrame(rows, columns=["promptset", "scope", "anchor_seed", "layer", "head", "stability"])


NULLS = {"permutations": 999, "seed": 0, "confidence": 0.9}


def test_two_layers_of_one_head_have_the_observed_range_under_the_layer_label_null(layer_stability):
    from headstab.sections.stability_gap import gap_null_table

    layers = layer_stability({1: [0.2, 0.9]}).assign(null=[0.3, 0.4], above_null=[-0.1, 0.5])
    table = gap_null_table(layers, head_table({1: [[0.2], [0.9]]}), **NULLS).set_index("anchor_seed")
    # every permutation of two values over two layers has the same range: no excess, p = 1
    assert table.loc[1, "delta_s_layer_null"] == pytest.approx(0.7) and table.loc[1, "delta_s_excess"] == pytest.approx(
        0
    )
    assert table.loc[1, "delta_s_layer_null_p"] == 1.0
    assert table.loc[1, "delta_s_prompt_null"] == pytest.approx(0.1) and table.loc[
        1, "delta_s_above_null"
    ] == pytest.approx(0.6)
    assert np.isnan(table.loc[1, "delta_s_content"])  # no content-variant columns in this table


def test_a_planted_layer_difference_stands_out_of_the_layer_label_null(layer_stability):
    from headstab.sections.stability_gap import gap_null_table

    rng = np.random.default_rng(0)
    values = 0.5 + 0.02 * rng.normal(size=(4, 4))
    values[0] += 0.3  # layer 0 more stable
    layers = layer_stability({1: values.mean(axis=1).tolist()}).assign(null=0.1, above_null=0.4)
    row = gap_null_table(layers, head_table({1: values.tolist()}), **NULLS).iloc[0]
    assert row["delta_s_layer_null_p"] < 0.01 and row["delta_s_excess"] > 0.1  # null range: the big heads spread out
    assert row["delta_s_layer_null_ci_low"] <= row["delta_s_layer_null"] <= row["delta_s_layer_null_ci_high"]
    exchangeable = 0.5 + 0.02 * rng.normal(size=(4, 4))
    same = gap_null_table(layer_stability({1: exchangeable.mean(axis=1).tolist()}), head_table({1: exchangeable.tolist()}),
                          **NULLS).iloc[0]  # fmt: skip
    assert same["delta_s_layer_null_p"] > 0.05 and abs(same["delta_s_excess"]) < 0.03


def test_summary_adds_the_null_columns_when_head_tables_are_given(layer_stability):
    from headstab.sections.stability_gap import GAP_NULL_COLUMNS

    tables = {"l2": layer_stability({1: [0.2, 0.9], 2: [0.5, 0.4]})}
    heads = {"l2": head_table({1: [[0.2], [0.9]], 2: [[0.5], [0.4]]})}
    facts = {"l2": {"n_layers": 2, "n_heads": 1, "optimizer": "Adam", "attention_only": False}}
    summary = stability_gap_summary(tables, facts, "primary", head_stability=heads, nulls=NULLS)
    assert list(summary.columns) == SUMMARY_COLUMNS + GAP_NULL_COLUMNS
    assert summary["delta_s_layer_null"].tolist() == pytest.approx([0.7, 0.1])


def test_depth_trend_of_a_range_that_grows_only_by_chance_vanishes_in_the_excess():
    from headstab.sections.stability_gap import gap_depth_table

    rng = np.random.default_rng(1)
    depths = [2, 2, 4, 4, 8, 8, 8, 4, 2]
    null = {2: 0.05, 4: 0.1, 8: 0.16}  # the expected range of more layers
    rows = []
    for i, depth in enumerate(depths):
        excess = 0.02 * rng.normal()
        rows.append({"architecture": f"a{i}", "n_layers": depth, "anchor_seed": 1, "delta_s": null[depth] + excess,
                     "delta_s_layer_null": null[depth], "delta_s_excess": excess})  # fmt: skip
    table = gap_depth_table(pd.DataFrame(rows), permutations=999, seed=0)
    trend = table.drop_duplicates("quantity").set_index("quantity")
    assert trend.loc["delta_s", "spearman_rho"] > 0.8 and trend.loc["delta_s", "p_value"] < 0.01
    assert abs(trend.loc["delta_s_excess", "spearman_rho"]) < 0.5 and trend.loc["delta_s_excess", "p_value"] > 0.1
    means = table[table["quantity"] == "delta_s"].set_index("n_layers")
    assert means["n_architectures"].tolist() == [3, 3, 3] and means.loc[8, "mean"] > means.loc[2, "mean"]
    one_depth = gap_depth_table(pd.DataFrame(rows).assign(n_layers=4), permutations=99, seed=0)
    assert one_depth["spearman_rho"].isna().all()
