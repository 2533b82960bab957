"""headstab.sections.stability_gap: §4.6 stability gap and depth of the extreme layers."""

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
