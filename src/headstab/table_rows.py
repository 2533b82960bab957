"""Helpers every section's tables share: one row filter and one correlation.

Tables are the workflow's tidy CSVs (`layer_stability.csv`, `head_stability.csv`, ...) read back as
pandas DataFrames; `select_rows` is the one way an analysis or a figure picks its prompt set, scope,
anchor or matrix from them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["pearson_or_nan", "select_rows"]


def select_rows(table: pd.DataFrame, name: str, **filters: object) -> pd.DataFrame:
    """Rows of `table` (called `name` in errors) where every column equals its value, in table order.

    A value of None filters nothing, but the column must then hold at most one distinct value: a
    table mixing prompt sets or scopes is refused rather than silently pooled. Fails, naming the
    table, when a filtered column is missing, when no row matches (listing the values there are),
    or when the table is empty.
    """
    selected = table
    for column, value in filters.items():
        if value is None:
            if column in selected.columns and selected[column].nunique() > 1:
                raise ValueError(
                    f"{name} holds several {column}s {sorted(map(str, selected[column].unique()))}; pass {column}="
                )
            continue
        if column not in selected.columns:
            raise ValueError(f"{name} has no column {column!r}; columns are {list(selected.columns)}")
        rows = selected[selected[column] == value]
        if rows.empty:
            available = sorted(map(str, selected[column].unique()))
            raise ValueError(f"{name} has no rows with {column} = {value!r}; available: {available}")
        selected = rows
    if selected.empty:
        raise ValueError(f"{name} is empty")
    return selected


def pearson_or_nan(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson (r, p); NaN where undefined, r = +-1 and p NaN for two points."""
    # Undefined for < 2 points or a constant variable; with 2 points r = +-1 and p is meaningless.
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    if len(x) == 2:
        return float(np.sign(np.corrcoef(x, y)[0, 1])), math.nan
    res = stats.pearsonr(x, y)
    return float(res.statistic), float(res.pvalue)
