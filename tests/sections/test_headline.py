"""headstab.sections.headline: the summary table read back, row by row, from every section's table
(tests/test_report_pages.py holds the report-page view of it)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol

from headstab.plan.yaml_files import load_yaml_file
from headstab.sections.headline import (
    HEADLINE_COLUMNS,
    PAPER_SOURCES,
    anchor_layer_difference,
    headline_table,
    paper_values_frame,
)

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
            "ci_calibration": ["descriptive", "calibrated", "descriptive", "descriptive"],
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
            "ci_calibration": ["calibrated", "descriptive", "descriptive"],
            "p_calibration": ["calibrated", "calibrated", "descriptive"],
        }
    )
    norms = pd.DataFrame(
        {
            "architecture": ["l2_h8", "l2_h8", "other"],
            "matrix": ["W_Q", "W_K", "W_Q"],
            "mean_pearson_r": [-0.9, 0.4, 0.5],
            "mean_pearson_r_ci_low": [-0.95, 0.3, 0.4],
            "mean_pearson_r_ci_high": [-0.85, 0.5, 0.6],
            "first_anchor_whole_layer_r": [-1.0, 1.0, 0.2],
            "by_construction": [True, True, False],
        }
    )
    finals = pd.DataFrame({"final_loss": [3.0, 3.5, 3.4]})
    # Layer stability per anchor: the paper's anchor is seed 1 (layer 0 more stable); cross-layer and len5 rows
    # and anchor 2 must be left out.
    per_anchor = pd.DataFrame(
        {
            "promptset": ["primary", "primary", "primary", "primary", "primary", "len5"],
            "scope": ["same_layer", "same_layer", "same_layer", "same_layer", "cross_layer", "same_layer"],
            "anchor_seed": [1, 1, 2, 2, 1, 1],
            "layer": [0, 1, 0, 1, 0, 0],
            "mean": [0.85, 0.55, 0.2, 0.9, 0.99, 0.0],
        }
    )
    tests_anchor = pd.DataFrame({"layer": [0, 1], "difference": [0.05, -0.02]})
    paper = paper_values_frame(
        {
            "paper_text": [
                {"architecture": "l2_h8", "statistic": "stability gap ΔS", "layer": None, "value": 0.25,
                 "source": "Fig. 7"},
                {"architecture": "l2_h8", "statistic": "layer stability", "layer": 1, "value": 0.62, "source": "Fig. 2"},
                {"architecture": "other", "statistic": "layer stability", "layer": 0, "value": 0.1, "source": "Fig. 2"},
                {"architecture": "l2_h8", "statistic": "weight-norm r with layer stability (W_Q)", "layer": None,
                 "value": -1.0, "source": "Table B.5"},
            ],
            "authors_notebooks": [
                {"architecture": "l2_h8", "statistic": "layer stability", "layer": 1, "value": 0.58,
                 "source": "notebook"},
                {"architecture": "l2_h8", "statistic": "weight-norm r with layer stability (W_K)", "layer": None,
                 "value": 0.9, "source": "notebook"},
            ],
        }
    )  # fmt: skip
    tables = {"pooled": pooled, "per_anchor": per_anchor, "gap": gap, "cka": cka, "tests": tests,
              "tests_anchor": tests_anchor, "weight_norms": norms, "finals": finals}  # fmt: skip
    return tables, paper


def _expected():
    """The headline of l2_h8 at 90% confidence, written out by hand in the order the sections come."""
    boot = "90% bootstrap"
    norm = "mean over anchors; 2 layers: every r is ±1 by construction"
    rows = [
        # statistic, layer, estimate, ci_low, ci_high, interval, null, init, p_value, ci_calibration,
        # p_calibration, anchor_estimate, paper_text, authors_notebooks, paper_source (labels: the source table's)
        ("layer stability", 0, 0.8, 0.75, 0.85, boot, 0.3, 0.5, NAN, "descriptive", NAN, 0.85, NAN, NAN,
         "§4.1, Fig. 2"),
        ("layer stability", 1, 0.6, 0.55, 0.65, boot, 0.35, 0.45, NAN, "calibrated", NAN, 0.55, 0.62, 0.58,
         "§4.1, Fig. 2"),
        # anchor 1: ΔS = 0.85 - 0.55, most stable layer 1 of 2, least stable layer 2 of 2
        ("stability gap ΔS", -1, 0.2, 0.1, 0.3, boot, NAN, NAN, NAN, NAN, NAN, 0.3, 0.25, NAN, "§4.6, Fig. 7"),
        ("relative depth of the most stable layer", -1, 0.5, 0.25, 0.5, boot, NAN, NAN, NAN, NAN, NAN, 0.5, NAN, NAN,
         "§4.6, Fig. 8"),
        ("relative depth of the least stable layer", -1, 1.0, 0.75, 1.0, boot, NAN, NAN, NAN, NAN, NAN, 1.0, NAN,
         NAN, "§4.6, Fig. 8"),
        ("residual-stream CKA", 0, 0.9, 0.85, 0.95, boot, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN,
         "§4.7, Fig. 9; §B.8"),
        ("residual-stream CKA", 1, 0.7, 0.6, 0.8, boot, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, "§4.7, Fig. 9; §B.8"),
        ("AdamW - Adam layer stability", 0, 0.02, 0.01, 0.03, "permutation 95%; p small: differ", NAN, NAN, 0.03,
         "descriptive", "calibrated", 0.05, NAN, NAN, "§4.5, Fig. 6; §B.6"),
        ("AdamW - Adam layer stability", 1, -0.01, -0.02, 0.0, "permutation 95%; p small: differ", NAN, NAN, 0.4,
         "descriptive", "descriptive", -0.02, NAN, NAN, "§4.5, Fig. 6; §B.6"),
        ("AdamW - Adam validation perplexity", -1, 0.1, -1.0, 1.2, "tost 90%; p small: within the margin", NAN, NAN,
         0.2, "calibrated", "calibrated", NAN, NAN, NAN, "§4.5, Fig. 6; §B.7 figures"),
        ("weight-norm r with layer stability (W_K)", -1, 0.4, 0.3, 0.5, norm, NAN, NAN, NAN, NAN, NAN, 1.0, NAN, 0.9,
         "§4.4.1; Table B.5 (W_Q, captioned Fig. 30)"),
        ("weight-norm r with layer stability (W_Q)", -1, -0.9, -0.95, -0.85, norm, NAN, NAN, NAN, NAN, NAN, -1.0,
         -1.0, NAN, "§4.4.1; Table B.5 (W_Q, captioned Fig. 30)"),
        ("final training loss", -1, 3.3, 3.0, 3.5, "range (min, max) over 3 refits, not an interval", NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, ""),
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=HEADLINE_COLUMNS[1:]).assign(architecture="l2_h8")
    return frame[HEADLINE_COLUMNS]


def test_the_headline_row_by_row():
    tables, paper = _inputs()
    table = headline_table("l2_h8", "primary", 0.9, **tables, paper=paper, anchor_seed=1)
    # copied numbers are exact; the ones computed, the mean final loss and the anchor's ΔS, sum 3 values near 3.5
    atol = reduction_atol(np.float64, 3, magnitude=3.5)
    pd.testing.assert_frame_equal(table, _expected(), check_exact=False, rtol=0, atol=atol)


def test_an_interval_the_section_labels_descriptive_says_so_in_the_headline():
    tables, _ = _inputs()
    cka = tables["cka"].assign(calibration=["descriptive", "calibrated", "descriptive"])
    norms = tables["weight_norms"].assign(ci_calibration=["descriptive", "calibrated", "descriptive"])
    table = headline_table("l2_h8", "primary", 0.9, cka=cka, weight_norms=norms).set_index(["statistic", "layer"])
    assert table.loc[("residual-stream CKA", 0), "interval"] == "90% bootstrap; descriptive"
    assert table.loc[("residual-stream CKA", 1), "interval"] == "90% bootstrap"
    assert table.loc[("weight-norm r with layer stability (W_Q)", -1), "interval"] == (
        "mean over anchors; descriptive; 2 layers: every r is ±1 by construction"
    )
    assert table.loc[("weight-norm r with layer stability (W_K)", -1), "interval"] == (
        "mean over anchors; 2 layers: every r is ±1 by construction"
    )


def test_cka_without_a_prompt_set_column_is_read_whole():
    tables, _ = _inputs()
    cka = tables["cka"].drop(columns="promptset")
    table = headline_table("l2_h8", "primary", 0.9, cka=cka)
    assert table["estimate"].tolist() == [0.9, 0.7, 0.1] and table["layer"].tolist() == [0, 1, 0]


def test_cka_reads_the_rows_over_every_token_with_their_step_0_cka_as_init():
    tables, _ = _inputs()
    every = tables["cka"].assign(positions="all", init_cka_mean=[0.3, 0.2, 0.1])
    cka = pd.concat([every, every.assign(positions="no_bos", cka_mean=0.0)], ignore_index=True)
    table = headline_table("l2_h8", "primary", 0.9, cka=cka)
    assert table["estimate"].tolist() == [0.9, 0.7] and table["init"].tolist() == [0.3, 0.2]


def test_no_section_gives_an_empty_table_of_the_headline_columns():
    table = headline_table("l2_h8", "primary", 0.9)
    assert list(table.columns) == HEADLINE_COLUMNS and table.empty


def test_columns_a_section_lacks_are_missing_numbers():
    tables, _ = _inputs()
    table = headline_table("l2_h8", "primary", 0.9, cka=tables["cka"])
    numeric = ["estimate", "ci_low", "ci_high", "null", "init", "p_value", "anchor_estimate", "paper_text",
               "authors_notebooks"]  # fmt: skip
    assert table[numeric].dtypes.tolist() == [np.float64] * len(numeric)
    assert table[["null", "init", "p_value", "anchor_estimate", "paper_text", "authors_notebooks"]].isna().all().all()


def test_paper_values_read_layers_and_per_matrix_statistics():
    frame = paper_values_frame(
        {
            "paper_text": [
                {"architecture": "l2_h8", "statistic": "layer stability", "layer": 2, "value": "0.6", "source": "Fig. 2"},
                {"architecture": "l2_h8", "statistic": "weight-norm r with layer stability (W_Q)", "value": -0.5,
                 "source": "Table B.5"},
            ],
            "authors_notebooks": None,
        }
    )  # fmt: skip
    assert list(frame.columns) == ["architecture", "statistic", "layer", "value", "source", "origin"]
    assert frame["layer"].tolist() == [2, -1] and frame["value"].tolist() == [0.6, -0.5]
    assert (frame["origin"] == "paper_text").all()
    with pytest.raises(
        ValueError, match=r"^paper value \{'architecture': 'l2_h8', 'value': 0.2, 'source': 'x'\} \(paper_text\) needs"
    ):
        paper_values_frame({"paper_text": [{"architecture": "l2_h8", "value": 0.2, "source": "x"}]})
    with pytest.raises(
        ValueError, match=r"^paper values have keys \['values'\]; expected \['paper_text', 'authors_notebooks'\]"
    ):
        paper_values_frame({"values": []})
    twice = {"architecture": "l2_h8", "statistic": "layer stability", "layer": 2, "value": 0.6, "source": "Fig. 2"}
    with pytest.raises(
        ValueError, match=r"^paper values give l2_h8 'layer stability' layer 2 twice in authors_notebooks"
    ):
        paper_values_frame({"authors_notebooks": [twice, twice]})
    assert len(paper_values_frame({"paper_text": [twice], "authors_notebooks": [twice]})) == 2  # one per origin


def test_the_paper_sources_name_the_papers_figures_and_tables():
    # §4.1's layer stability is Fig. 2 (Fig. 3 is the alignment map); §B.7 has figures, no table.
    assert PAPER_SOURCES["layer stability"] == "§4.1, Fig. 2"
    assert not any("Table B.7" in source for source in PAPER_SOURCES.values())
    assert "§B.7 figures" in PAPER_SOURCES["AdamW - Adam validation perplexity"]
    assert "Table B.5" in PAPER_SOURCES["weight-norm r with layer stability"]


def test_the_anchor_estimate_is_the_first_seeds_own_where_the_headline_pools_all_anchors():
    tables, _ = _inputs()
    table = headline_table("l2_h8", "primary", 0.9, pooled=tables["pooled"], per_anchor=tables["per_anchor"],
                           gap=tables["gap"], anchor_seed=2).set_index(["statistic", "layer"])  # fmt: skip
    assert table.loc[("layer stability", 0), "anchor_estimate"] == 0.2
    assert table.loc[("relative depth of the most stable layer", -1), "anchor_estimate"] == 1.0  # layer 2 of 2
    assert table.loc[("stability gap ΔS", -1), "anchor_estimate"] == pytest.approx(0.7)
    no_anchor = headline_table("l2_h8", "primary", 0.9, pooled=tables["pooled"], per_anchor=tables["per_anchor"])
    assert no_anchor["anchor_estimate"].isna().all()


def test_anchor_layer_difference_is_adamw_minus_adam_of_the_first_seed():
    def layers(means, anchor=1):
        return pd.DataFrame({"promptset": "primary", "scope": "same_layer", "anchor_seed": anchor,
                             "layer": range(len(means)), "mean": means})  # fmt: skip

    adam = pd.concat([layers([0.8, 0.5]), layers([0.1, 0.1], anchor=2), layers([0.0, 0.0]).assign(promptset="len5")])
    adamw = pd.concat([layers([0.9, 0.6]), layers([0.9, 0.9], anchor=2)])
    difference = anchor_layer_difference(adam, adamw, 1, "primary")
    assert list(difference.columns) == ["layer", "difference"] and difference["layer"].tolist() == [0, 1]
    np.testing.assert_allclose(difference["difference"], [0.1, 0.1], atol=reduction_atol(np.float64, 2))


def test_a_table_of_no_section_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"headline_table got tables \['kl'\] of no section"):
        headline_table("l2_h8", "primary", 0.9, kl=pd.DataFrame())


REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_paper_values_fill_both_columns_where_they_disagree():
    paper = paper_values_frame(load_yaml_file(REPO / "resources/paper_values.yaml"))
    assert set(paper["origin"]) == {"paper_text", "authors_notebooks"}
    pooled = pd.DataFrame({"promptset": "primary", "scope": "same_layer", "layer": range(8), "stability": 0.8,
                           "ci_low": 0.7, "ci_high": 0.9, "null": 0.3, "init": 0.5})  # fmt: skip
    table = headline_table("l8_h8", "primary", 0.95, pooled=pooled, paper=paper).set_index("layer")
    # Layer 5 (0-based 4): "≈ 0.70" in the text, 0.643 printed by the notebook; layer 1 is 1.0 and 0.970.
    assert table.loc[4, ["paper_text", "authors_notebooks"]].tolist() == [0.70, 0.643109]
    assert table.loc[0, ["paper_text", "authors_notebooks"]].tolist() == [1.0, 0.970063]
    assert table.loc[[1, 2, 3, 5, 6, 7], ["paper_text", "authors_notebooks"]].isna().all().all()
    norms = pd.DataFrame({"architecture": "gpt2", "matrix": ["W_Q", "W_K"], "mean_pearson_r": [-0.4, -0.3]})
    rows = headline_table("gpt2", "primary", 0.95, weight_norms=norms, paper=paper).set_index("statistic")
    assert rows.loc["weight-norm r with layer stability (W_Q)", "paper_text"] == -0.5078991103274401  # Table B.5
    assert rows.loc["weight-norm r with layer stability (W_K)", "authors_notebooks"] == -0.423620


def test_the_summary_caption_says_the_papers_values_are_for_its_paper_scale_models():
    caption = (REPO / "workflow/report/headline.rst").read_text()
    assert "paper_text" in caption and "authors_notebooks" in caption and "anchor_estimate" in caption
    assert "paper scale" in caption and "demo" in caption


def test_with_anchors_first_the_estimate_is_the_papers_anchors_own():
    tables, paper = _inputs()
    per_anchor = tables["per_anchor"].assign(ci_low=0.1, ci_high=0.95, null=0.2, init=0.3)
    tables = {**tables, "per_anchor": per_anchor}
    table = headline_table("l2_h8", "primary", 0.9, **tables, paper=paper, anchor_seed=1, anchors="first")
    rows = table.set_index(["statistic", "layer"])
    # layer stability: anchor 1's mean with its own interval, null and baseline
    layer = rows.loc[("layer stability", 1)]
    assert layer[["estimate", "ci_low", "ci_high", "null", "init", "anchor_estimate"]].tolist() == [
        0.55, 0.1, 0.95, 0.2, 0.3, 0.55]  # fmt: skip
    assert layer["interval"] == "90% bootstrap, anchor seed 1 only" and layer["paper_text"] == 0.62
    gap = rows.loc[("stability gap ΔS", -1)]
    assert gap["estimate"] == pytest.approx(0.3) and np.isnan(gap["ci_low"]) and gap["interval"] == "anchor seed 1 only"
    norm = rows.loc[("weight-norm r with layer stability (W_Q)", -1)]
    assert np.isnan(norm["estimate"])  # this summary has no first_anchor_r: a missing number, not the mean
    # the tests and CKA stay over refits
    assert rows.loc[("AdamW - Adam layer stability", 0), "estimate"] == 0.02
    assert rows.loc[("residual-stream CKA", 0), "estimate"] == 0.9
    with pytest.raises(ValueError, match=r"analysis.anchors first: l2_h8 has no same-layer rows of anchor seed 9"):
        headline_table("l2_h8", "primary", 0.9, **tables, anchor_seed=9, anchors="first")
    with pytest.raises(ValueError, match=r"anchors must be all or first"):
        headline_table("l2_h8", "primary", 0.9, anchors="one")


def test_with_anchors_first_table_b5s_r_is_the_anchors_and_the_gap_its_three_rows():
    tables, paper = _inputs()
    norms = tables["weight_norms"].assign(first_anchor_r=[-0.7, 0.8, 0.1], ci_calibration="descriptive")
    tables = {**tables, "weight_norms": norms}
    rows = headline_table("l2_h8", "primary", 0.9, **tables, anchor_seed=1, anchors="first")
    rows = rows.set_index(["statistic", "layer"])
    norm = rows.loc[("weight-norm r with layer stability (W_Q)", -1)]
    assert (norm["estimate"], norm["anchor_estimate"]) == (-0.7, -1.0) and np.isnan(norm["ci_low"])
    # one anchor's r has no interval, so nothing to call descriptive
    assert norm["interval"] == "anchor seed 1 only; 2 layers: every r is ±1 by construction"
    for name in (
        "stability gap ΔS",
        "relative depth of the most stable layer",
        "relative depth of the least stable layer",
    ):
        gap = rows.loc[(name, -1)]
        assert gap["interval"] == "anchor seed 1 only" and gap["anchor_estimate"] == gap["estimate"], name
    with pytest.raises(ValueError, match=r"^analysis.anchors first: l2_h8 has no same-layer rows of anchor seed 1"):
        headline_table("l2_h8", "primary", 0.9, gap=tables["gap"], anchor_seed=1, anchors="first")


def test_without_the_per_anchor_table_the_gap_has_no_anchor_estimate():
    tables, _ = _inputs()
    rows = headline_table("l2_h8", "primary", 0.9, gap=tables["gap"], anchor_seed=1).set_index("statistic")
    assert rows.loc["stability gap ΔS", "anchor_estimate"] != rows.loc["stability gap ΔS", "anchor_estimate"]  # NaN


def test_the_first_number_given_twice_is_named():
    entry = {"statistic": "layer stability", "value": 0.5, "source": "Fig. 2"}
    twice = [
        entry | {"architecture": "a", "layer": 0},
        entry | {"architecture": "b", "layer": 0},
        entry | {"architecture": "b", "layer": 0, "value": 0.7},  # another value: still the same number twice
        entry | {"architecture": "a", "layer": 0, "value": 0.6},  # a's is the first number given twice
    ]
    with pytest.raises(ValueError, match=r"^paper values give a 'layer stability' layer 0 twice in paper_text;"):
        paper_values_frame({"paper_text": twice})


def test_a_jackknife_t_row_shows_the_jackknife_t_interval_and_label_beside_its_p_not_the_bootstraps():
    """optimizer_tests.csv: p_value is the jackknife-t test's, ci_low/ci_high the paired multi-bootstrap's."""
    tables, _ = _inputs()
    tests = tables["tests"].assign(
        test=["paired_tost", "jackknife_t", "jackknife_t"],
        jackknife_ci_low=[np.nan, 0.005, -0.04],
        jackknife_ci_high=[np.nan, 0.035, 0.02],
        jackknife_calibration=[np.nan, "calibrated", "descriptive"],
        ci_calibration=["calibrated", "descriptive", "calibrated"],
    )
    table = headline_table("l2_h8", "primary", 0.9, tests=tests).set_index(["statistic", "layer"])
    first, second = table.loc[("AdamW - Adam layer stability", 0)], table.loc[("AdamW - Adam layer stability", 1)]
    assert (first["ci_low"], first["ci_high"], first["ci_calibration"]) == (0.005, 0.035, "calibrated")
    assert (second["ci_low"], second["ci_high"], second["ci_calibration"]) == (-0.04, 0.02, "descriptive")
    assert first["interval"] == "jackknife_t 95%; p small: differ" and first["p_value"] == 0.03
    perplexity = table.loc[("AdamW - Adam validation perplexity", -1)]  # the TOST keeps its own interval
    assert (perplexity["ci_low"], perplexity["ci_high"], perplexity["ci_calibration"]) == (-1.0, 1.2, "calibrated")
