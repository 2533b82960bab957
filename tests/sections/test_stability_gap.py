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
