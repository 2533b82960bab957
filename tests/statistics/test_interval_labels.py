"""Calibration columns of stability's tables: each interval labelled by its method at the row's refits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstab.statistics import calibration
from headstab.statistics.calibration import Method
from headstab.statistics.interval_labels import GAP_METHODS, LABEL_COLUMNS, gap_labels, interval_labels


@pytest.fixture
def registry(monkeypatch):
    """A registry where the anchor-head interval is calibrated from 5 refits and everything else at none."""
    methods = {name: Method(name, m.reports, m.unit, None, m.statistic) for name, m in calibration.METHODS.items()}
    methods["multibootstrap_anchor_head"] = Method("multibootstrap_anchor_head", "interval", "refits", 5, "")
    methods["multibootstrap_cross_layer"] = Method("multibootstrap_cross_layer", "interval", "refits", 12, "")
    methods["jackknife_anchor_head"] = Method("jackknife_anchor_head", "interval", "refits", 4, "")
    methods["jackknife_above_null_anchor_head"] = Method(
        "jackknife_above_null_anchor_head", "interval", "refits", 5, ""
    )
    monkeypatch.setattr(calibration, "METHODS", methods)


def listed(labels: pd.Series) -> list:
    """The labels as a list, a missing label as None (pandas may hold strings as a string dtype with NA)."""
    return [label if isinstance(label, str) else None for label in labels]


def rows():
    values = {column: [0.1, 0.1, np.nan] for column in ["ci_low", "null_ci_low", "above_null_ci_low", "init_ci_low"]}
    values.update({"one_to_one_ci_low": [0.2, np.nan, np.nan], "stability_content_ci_low": [np.nan] * 3})
    values["jackknife_ci_low"] = values["above_null_jackknife_ci_low"] = [0.3, np.nan, np.nan]
    return pd.DataFrame({"scope": ["same_layer", "cross_layer", "cross_layer"], **values})


def test_each_interval_gets_its_methods_label_at_the_rows_refits_and_none_where_it_has_no_interval(registry):
    table = interval_labels(rows(), "head", 5)
    assert list(table.columns[-len(LABEL_COLUMNS) :]) == LABEL_COLUMNS
    assert listed(table["ci_calibration"]) == ["calibrated", "descriptive", None]  # cross-layer: its own method
    assert listed(table["null_ci_calibration"]) == ["descriptive", None, None]  # no null for cross-layer rows
    assert listed(table["one_to_one_calibration"]) == ["descriptive", None, None]
    assert table["content_calibration"].isna().all() and listed(table["jackknife_calibration"])[0] == "calibrated"
    at_4 = interval_labels(rows(), "head", 4)
    assert listed(at_4["ci_calibration"]) == ["descriptive", "descriptive", None]
    assert listed(at_4["jackknife_calibration"]) == ["calibrated", None, None]  # each interval its own method
    assert listed(at_4["above_null_jackknife_calibration"]) == ["descriptive", None, None]
    assert listed(table["above_null_jackknife_calibration"]) == ["calibrated", None, None]
    assert listed(interval_labels(rows(), "head", 12)["ci_calibration"])[:2] == ["calibrated", "calibrated"]
    pooled = interval_labels(rows(), "pooled", 50)  # multibootstrap_pooled: descriptive at every n here
    assert listed(pooled["ci_calibration"])[0] == "descriptive" and pooled["jackknife_calibration"][0] == "descriptive"
    assert "ci_calibration" not in rows().columns  # the input is left as it was
    with pytest.raises(ValueError, match="level must be one of"):
        interval_labels(rows(), "anchor", 5)


def test_gap_rows_of_the_multibootstrap_are_labelled_and_other_rows_left_to_their_methods(registry, monkeypatch):
    gap = pd.DataFrame({"statistic": ["delta_s", "r_max", "delta_s_layer_null"], "p_value": [np.nan, np.nan, 0.01]})
    labelled = gap_labels(gap, 12)
    assert listed(labelled["ci_calibration"]) == ["descriptive", "descriptive", None]
    assert labelled["p_calibration"].isna().all() and "ci_calibration" not in gap.columns
    methods = dict(calibration.METHODS)
    methods["multibootstrap_gap"] = Method("multibootstrap_gap", "interval", "refits", 12, "")
    monkeypatch.setattr(calibration, "METHODS", methods)
    assert listed(gap_labels(gap, 12)["ci_calibration"])[:2] == ["calibrated", "calibrated"]
    assert listed(gap_labels(gap, 5)["ci_calibration"])[:2] == ["descriptive", "descriptive"]
    kept = gap_labels(gap.assign(p_calibration=["x", "y", "z"]), 12)
    assert listed(kept["p_calibration"]) == ["x", "y", "z"]
    assert set(GAP_METHODS.values()) == {"multibootstrap_gap"} and "delta_s_excess" not in GAP_METHODS


def test_gap_labels_follow_the_rows_index_and_are_strings_with_missing_labels(registry):
    # rows kept from a larger table: an index that is not 0..n-1 must still carry each row's own label
    gap = pd.DataFrame({"statistic": ["delta_s_layer_null", "delta_s", "r_min"]}, index=[7, 3, 12])
    labelled = gap_labels(gap, 12)
    assert list(labelled.index) == [7, 3, 12]
    assert listed(labelled["ci_calibration"]) == [None, "descriptive", "descriptive"]
    for column in ("ci_calibration", "p_calibration"):
        assert labelled[column].dtype == "string", column
    assert labelled["p_calibration"].isna().all()
    none = gap_labels(gap.iloc[:1], 12)  # no multi-bootstrap row: still a string column, all missing
    assert none["ci_calibration"].dtype == "string" and none["ci_calibration"].isna().all()
