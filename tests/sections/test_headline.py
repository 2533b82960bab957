"""headstab.sections.headline: the summary table read back, row by row, from every section's table
(tests/test_report_pages.py holds the report-page view of it)."""

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.sections.headline import HEADLINE_COLUMNS, headline_table, paper_values_frame

NAN = np.nan


def _inputs():
    """One table per section, each with rows the headline must leave out (another prompt set, scope or arch)."""
    pooled = pd.DataFrame(
        {
            "promptset": ["primary", "primary", "primary", "len5"],
            "scope": ["same_layer", "same_layer", "cross_layer", "same_layer"],
            "layer": [0, 1, 0, 0],
            "stability": [0.8, 0.6, 0.7, 0.1],
            "ci_low": [0.75, 0.55, 0.6, 0.0],
            "ci_high": [0.85, 0.65, 0.8, 0.2],
            "null": [0.3, 0.35, NAN, 0.0],
            "init": [0.5, 0.45, NAN, 0.0],
        }
    )
    gap = pd.DataFrame(
        {
            "promptset": ["primary", "primary", "primary", "primary", "len5"],
            "statistic": ["s_max", "r_min", "delta_s", "r_max", "delta_s"],
            "estimate": [0.8, 1.0, 0.2, 0.5, 0.9],
            "ci_low": [0.7, 0.75, 0.1, 0.25, 0.8],
            "ci_high": [0.9, 1.0, 0.3, 0.5, 1.0],
        }
    )
    cka = pd.DataFrame(
        {
            "promptset": ["primary", "primary", "len5"],
            "layer": [0, 1, 0],
            "cka_mean": [0.9, 0.7, 0.1],
            "ci_low": [0.85, 0.6, 0.0],
            "ci_high": [0.95, 0.8, 0.2],
        }
    )
    tests = pd.DataFrame(
        {
            "statistic": ["perplexity", "layer_stability", "layer_stability"],
            "layer": [-1, 0, 1],
            "difference": [0.1, 0.02, -0.01],
            "ci_low": [-1.0, 0.01, -0.02],
            "ci_high": [1.2, 0.03, 0.0],
            "confidence": [0.9, 0.95, 0.95],
            "test": ["tost", "permutation", "permutation"],
            "p_value": [0.2, 0.03, 0.4],
        }
    )
    norms = pd.DataFrame(
        {
            "architecture": ["l2_h8", "l2_h8", "other"],
            "matrix": ["W_Q", "W_K", "W_Q"],
            "mean_pearson_r": [-0.9, 0.4, 0.5],
            "mean_pearson_r_ci_low": [-0.95, 0.3, 0.4],
            "mean_pearson_r_ci_high": [-0.85, 0.5, 0.6],
        }
    )
    finals = pd.DataFrame({"final_loss": [3.0, 3.5, 3.4]})
    paper = paper_values_frame(
        [
            {
                "architecture": "l2_h8",
                "statistic": "stability gap ΔS",
                "layer": None,
                "value": 0.25,
                "source": "Fig. 7",
            },
            {"architecture": "l2_h8", "statistic": "layer stability", "layer": 1, "value": 0.62, "source": "Fig. 3"},
            {"architecture": "other", "statistic": "layer stability", "layer": 0, "value": 0.1, "source": "Fig. 3"},
        ]
    )
    return {"pooled": pooled, "gap": gap, "cka": cka, "tests": tests, "weight_norms": norms, "finals": finals}, paper


def _expected():
    """The headline of l2_h8 at 90% confidence, written out by hand in the order the sections come."""
    boot = "90% bootstrap"
    rows = [
        # statistic, layer, estimate, ci_low, ci_high, interval, null, init, p_value, paper_value, paper_source
        ("layer stability", 0, 0.8, 0.75, 0.85, boot, 0.3, 0.5, NAN, NAN, "§4.1, Fig. 3"),
        ("layer stability", 1, 0.6, 0.55, 0.65, boot, 0.35, 0.45, NAN, 0.62, "§4.1, Fig. 3"),
        ("stability gap ΔS", -1, 0.2, 0.1, 0.3, boot, NAN, NAN, NAN, 0.25, "§4.6, Fig. 7"),
        ("relative depth of the most stable layer", -1, 0.5, 0.25, 0.5, boot, NAN, NAN, NAN, NAN, "§4.6, Fig. 8"),
        ("relative depth of the least stable layer", -1, 1.0, 0.75, 1.0, boot, NAN, NAN, NAN, NAN, "§4.6, Fig. 8"),
        ("residual-stream CKA", 0, 0.9, 0.85, 0.95, boot, NAN, NAN, NAN, NAN, "§4.7, Fig. 9 / B.8"),
        ("residual-stream CKA", 1, 0.7, 0.6, 0.8, boot, NAN, NAN, NAN, NAN, "§4.7, Fig. 9 / B.8"),
        ("AdamW - Adam layer stability", 0, 0.02, 0.01, 0.03, "permutation 95%", NAN, NAN, 0.03, NAN, "§4.5, Fig. 6 / B.6"),
        ("AdamW - Adam layer stability", 1, -0.01, -0.02, 0.0, "permutation 95%", NAN, NAN, 0.4, NAN, "§4.5, Fig. 6 / B.6"),
        ("AdamW - Adam validation perplexity", -1, 0.1, -1.0, 1.2, "tost 90%", NAN, NAN, 0.2, NAN, "§4.5, Table B.7"),
        ("weight-norm r with layer stability (W_K)", -1, 0.4, 0.3, 0.5, "mean over anchors", NAN, NAN, NAN, NAN,
         "§4.4.1, Table B.5"),
        ("weight-norm r with layer stability (W_Q)", -1, -0.9, -0.95, -0.85, "mean over anchors", NAN, NAN, NAN, NAN,
         "§4.4.1, Table B.5"),
        ("final training loss", -1, 3.3, 3.0, 3.5, "range over 3 refits", NAN, NAN, NAN, NAN, ""),
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=HEADLINE_COLUMNS[1:]).assign(architecture="l2_h8")
    return frame[HEADLINE_COLUMNS]


def test_the_headline_row_by_row():
    tables, paper = _inputs()
    table = headline_table("l2_h8", "primary", 0.9, **tables, paper=paper)
    # copied numbers are exact; the one computed, the mean final loss, sums 3 values near 3.5
    atol = reduction_atol(np.float64, 3, magnitude=3.5)
    pd.testing.assert_frame_equal(table, _expected(), check_exact=False, rtol=0, atol=atol)


def test_cka_without_a_prompt_set_column_is_read_whole():
    tables, _ = _inputs()
    cka = tables["cka"].drop(columns="promptset")
    table = headline_table("l2_h8", "primary", 0.9, cka=cka)
    assert table["estimate"].tolist() == [0.9, 0.7, 0.1] and table["layer"].tolist() == [0, 1, 0]


def test_no_section_gives_an_empty_table_of_the_headline_columns():
    table = headline_table("l2_h8", "primary", 0.9)
    assert list(table.columns) == HEADLINE_COLUMNS and table.empty


def test_columns_a_section_lacks_are_missing_numbers():
    tables, _ = _inputs()
    table = headline_table("l2_h8", "primary", 0.9, cka=tables["cka"])
    numeric = ["estimate", "ci_low", "ci_high", "null", "init", "p_value", "paper_value"]
    assert table[numeric].dtypes.tolist() == [np.float64] * len(numeric)
    assert table[["null", "init", "p_value", "paper_value"]].isna().all().all()


def test_paper_values_read_layers_and_per_matrix_statistics():
    frame = paper_values_frame(
        [
            {"architecture": "l2_h8", "statistic": "layer stability", "layer": 2, "value": "0.6", "source": "Fig. 3"},
            {"architecture": "l2_h8", "statistic": "weight-norm r with layer stability (W_Q)", "value": -0.5,
             "source": "Table B.5"},
        ]
    )  # fmt: skip
    assert list(frame.columns) == ["architecture", "statistic", "layer", "value", "source"]
    assert frame["layer"].tolist() == [2, -1] and frame["value"].tolist() == [0.6, -0.5]
    with pytest.raises(
        ValueError, match=r"^paper value \{'architecture': 'l2_h8', 'value': 0.2, 'source': 'x'\} needs"
    ):
        paper_values_frame([{"architecture": "l2_h8", "value": 0.2, "source": "x"}])
