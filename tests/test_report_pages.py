"""The report's table pages (headstab.report_pages) and summary (headstab.sections.headline): where each
table is filed, what a page shows, and the headline numbers read back from the sections' tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstab.report_pages import count_rows, report_place, table_kind, table_page, write_table_pages
from headstab.sections.headline import headline_table, paper_values_frame


def test_tables_are_filed_beside_their_figures():
    assert table_kind("r/l2_h8/tables/layer_stability.csv") == ("arch", "l2_h8", "layer_stability")
    assert table_kind("r/compare/l2_h8/tables/perplexity.csv") == ("compare", "l2_h8", "perplexity")
    assert table_kind("r/summary/tables/stability_gap.csv") == ("summary", "", "stability_gap")
    assert report_place("arch", "layer_stability", "l2_h8") == ("l2_h8", "Stability (§4.1)")
    assert report_place("arch", "seeds_needed", "l2_h8") == ("Stability against chance", "l2_h8")
    assert report_place("compare", "perplexity", "l2_h8") == ("Adam vs AdamW (§4.5)", "l2_h8")
    assert report_place("summary", "stability_gap") == ("Across architectures", "Stability gap (§4.6)")
    assert report_place("arch", "a_new_table", "l2_h8") == ("l2_h8", "Tables")  # a new section still shows


def test_a_page_shows_the_first_rows_and_says_how_many_there_are(tmp_path):
    source = tmp_path / "r/l2_h8/tables/layer_stability.csv"
    source.parent.mkdir(parents=True)
    pd.DataFrame({"layer": range(7), "mean": np.linspace(0, 1, 7)}).to_csv(source, index=False)
    assert count_rows(source) == 7
    (page,) = write_table_pages([str(source)], tmp_path / "out", max_rows=5)
    assert page == tmp_path / "out/l2_h8/Stability (§4.1)/layer_stability.html"
    text = page.read_text()
    assert "the first 5 of 7 rows" in text and text.count("<tr") == 6 and "<th>mean</th>" in text
    assert "all 2 rows" in table_page(pd.DataFrame({"a": [1, 2]}), "t", "x.csv", 2)


def test_two_tables_on_one_page_are_refused(tmp_path):
    paths = []
    for run in ("r1", "r2"):  # the same table of the same architecture in two results directories
        path = tmp_path / f"{run}/l2_h8/tables/layer_stability.csv"
        path.parent.mkdir(parents=True)
        path.write_text("layer\n1\n")
        paths.append(str(path))
    with pytest.raises(ValueError, match="would share the report page"):
        write_table_pages(paths, tmp_path / "out")


def test_a_csv_that_is_no_table_of_the_run_is_refused_by_name(tmp_path):
    path = tmp_path / "r/l2_h8/checkpoints/seed1/train_log.csv"
    with pytest.raises(ValueError, match=r"train_log.csv is not a table of a headstab run"):
        table_kind(path)


def _tables():
    pooled = pd.DataFrame({"promptset": "primary", "scope": ["same_layer", "same_layer", "cross_layer"],
                           "layer": [0, 1, 0], "stability": [0.8, 0.6, 0.7], "ci_low": [0.75, 0.55, 0.6],
                           "ci_high": [0.85, 0.65, 0.8], "null": [0.3, 0.3, np.nan], "init": [0.5, 0.5, np.nan]})  # fmt: skip
    gap = pd.DataFrame({"promptset": "primary", "statistic": ["s_max", "delta_s", "r_max", "r_min"],
                        "estimate": [0.8, 0.2, 0.5, 1.0], "ci_low": [0.7, 0.1, 0.5, 1.0], "ci_high": [0.9, 0.3, 0.5, 1.0]})  # fmt: skip
    tests = pd.DataFrame({"statistic": ["layer_stability", "perplexity"], "layer": [0, -1], "difference": [0.02, 0.1],
                          "ci_low": [0.01, -1.0], "ci_high": [0.03, 1.2], "confidence": [0.95, 0.9],
                          "test": ["permutation", "tost"], "p_value": [0.03, 0.2]})  # fmt: skip
    norms = pd.DataFrame({"architecture": ["l2_h8", "other"], "matrix": "W_Q", "mean_pearson_r": [-0.9, 0.5],
                          "mean_pearson_r_ci_low": [-0.95, 0.4], "mean_pearson_r_ci_high": [-0.85, 0.6]})  # fmt: skip
    finals = pd.DataFrame({"final_loss": [3.0, 3.2, 3.4]})
    return {"pooled": pooled, "gap": gap, "tests": tests, "weight_norms": norms, "finals": finals}


def test_headline_reads_each_number_from_its_table_and_names_where_the_paper_reports_it():
    paper = paper_values_frame({"paper_text": [{"architecture": "l2_h8", "statistic": "stability gap ΔS",
                                                "layer": None, "value": 0.25, "source": "Fig. 7"}]})  # fmt: skip
    table = headline_table("l2_h8", "primary", 0.95, **_tables(), paper=paper).set_index(["statistic", "layer"])
    assert table.loc[("layer stability", 1), ["estimate", "ci_low", "null", "init"]].tolist() == [0.6, 0.55, 0.3, 0.5]
    assert ("layer stability", 0) in table.index and len(table.loc["layer stability"]) == 2  # same-layer only
    assert table.loc[("stability gap ΔS", -1), ["estimate", "paper_text", "paper_source"]].tolist() == [
        0.2, 0.25, "§4.6, Fig. 7"]  # fmt: skip
    assert table.loc[("relative depth of the least stable layer", -1), "estimate"] == 1.0
    assert table.loc[("AdamW - Adam layer stability", 0), ["estimate", "p_value", "interval"]].tolist() == [
        0.02, 0.03, "permutation 95%; p small: differ"]  # fmt: skip
    assert table.loc[("weight-norm r with layer stability (W_Q)", -1), "paper_source"].startswith("§4.4.1; Table B.5")
    assert table.loc[("weight-norm r with layer stability (W_Q)", -1), "estimate"] == -0.9
    assert table.loc[("final training loss", -1), ["estimate", "ci_low", "ci_high", "interval"]].tolist() == [
        pytest.approx(3.2), 3.0, 3.4, "range (min, max) over 3 refits, not an interval"]  # fmt: skip


def test_a_section_the_run_left_out_leaves_its_rows_out():
    table = headline_table("l2_h8", "primary", 0.95, pooled=_tables()["pooled"])
    assert set(table["statistic"]) == {"layer stability"} and table["paper_text"].isna().all()


def test_a_paper_value_without_its_source_is_refused():
    with pytest.raises(ValueError, match="needs a statistic of .* and its source"):
        paper_values_frame({"paper_text": [{"architecture": "l2_h8", "statistic": "stability gap ΔS", "value": 0.2}]})
