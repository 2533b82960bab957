"""The calibration columns of stability's interval tables: how `headstab.statistics.calibration` labels each
interval of a row at the row's number of refits, "calibrated" or "descriptive" (docs/statistics.md, "Calibration").

A column is empty where the row has no such interval (cross-layer rows have no null, a run without step 0 no
init). Every label is taken at the number of refits the row's statistic is computed over.
"""

from __future__ import annotations

import pandas as pd

from headstab.statistics.calibration import calibration_label

__all__ = ["GAP_LABEL_COLUMNS", "GAP_METHODS", "LABEL_COLUMNS", "gap_labels", "interval_labels"]

# label column -> (the interval column it labels, method of same-layer rows by table level, of cross-layer rows)
_LEVEL_METHODS = {"head": "anchor_head", "layer": "anchor_layer", "pooled": "pooled"}
_LABELS = {
    "ci_calibration": ("ci_low", "multibootstrap_{level}", "multibootstrap_cross_layer"),
    "null_ci_calibration": ("null_ci_low", "multibootstrap_null", None),
    "above_null_ci_calibration": ("above_null_ci_low", "multibootstrap_above_null", None),
    "init_ci_calibration": ("init_ci_low", "multibootstrap_init", None),
    "one_to_one_calibration": ("one_to_one_ci_low", "multibootstrap_one_to_one", None),
    "content_calibration": ("stability_content_ci_low", "multibootstrap_content", None),
    "jackknife_calibration": ("jackknife_ci_low", "jackknife_{level}", None),
    "above_null_jackknife_calibration": ("above_null_jackknife_ci_low", "jackknife_above_null_{level}", None),
}
LABEL_COLUMNS = list(_LABELS)
# stability_gap_intervals.csv: the statistics whose interval is a multi-bootstrap of the pooled layer replicates.
GAP_METHODS = dict.fromkeys(
    ["delta_s", "s_max", "s_min", "r_max", "r_min", "delta_s_prompt_null", "delta_s_above_null"], "multibootstrap_gap"
)
GAP_METHODS.update(dict.fromkeys(["delta_s_content", "delta_s_content_above_null"], "multibootstrap_gap"))
GAP_LABEL_COLUMNS = ["ci_calibration", "p_calibration"]


def interval_labels(table: pd.DataFrame, level: str, n_refits: int) -> pd.DataFrame:
    """`table` (head, layer or pooled rows of `headstab.statistics.interval_tables`, with a `scope` column) with
    LABEL_COLUMNS: each interval's label at n_refits, empty where the row's interval is NaN or undefined."""
    if level not in _LEVEL_METHODS:
        raise ValueError(f"level must be one of {sorted(_LEVEL_METHODS)}; got {level!r}")
    table = table.copy()
    same = table["scope"] == "same_layer"
    for column, (source, same_method, cross_method) in _LABELS.items():
        labels = pd.Series(None, index=table.index, dtype=object)
        for rows, method in ((same, same_method), (~same, cross_method)):
            if method is not None:
                method = method.format(level=_LEVEL_METHODS[level])
                labels[rows & table[source].notna()] = calibration_label(method, n_refits)
        table[column] = labels
    return table


def gap_labels(gap: pd.DataFrame, n_refits: int) -> pd.DataFrame:
    """`gap` (GAP_INTERVAL_COLUMNS rows) with GAP_LABEL_COLUMNS: ci_calibration of the multi-bootstrap rows of
    GAP_METHODS at n_refits; rows of other statistics and p_calibration are left for their own methods."""
    gap = gap.copy()
    methods = gap["statistic"].map(GAP_METHODS)
    gap["ci_calibration"] = pd.Series(
        [calibration_label(m, n_refits) if isinstance(m, str) else pd.NA for m in methods],
        index=gap.index,
        dtype="string",
    )
    if "p_calibration" not in gap.columns:
        gap["p_calibration"] = pd.Series(pd.NA, index=gap.index, dtype="string")
    return gap
