"""Stability against chance on a line plot: the anchor's interval, the prompt-permutation null, step 0.

The stability tables carry these as optional columns (`headstab.statistics.interval_tables`): ci_low, ci_high
(multi-bootstrap interval over pair refits and prompt groups), null, null_ci_low, null_ci_high (the
same statistic with each anchor head on prompt p compared with the candidates on another prompt of
the same token length: the metric's floor for unrelated patterns) and init (the same refits at step
0, untrained). Tables written before them lack the columns, and the null and init are NaN for the
cross-layer scope: every function here draws only what is present and finite, and says whether it drew.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

__all__ = [
    "CHANCE_COLUMNS",
    "INIT_LABEL",
    "chance_columns",
    "draw_init",
    "draw_interval",
    "draw_null",
    "has_finite",
    "null_label",
]

CHANCE_COLUMNS = ["ci_low", "ci_high", "null", "null_ci_low", "null_ci_high", "init", "init_ci_low", "init_ci_high"]
NULL_COLOUR = "tab:grey"
INIT_LABEL = "step 0, untrained"


def null_label(confidence: float = 0.95) -> str:
    return f"prompt-permutation null ({confidence:.0%} CI)"


def has_finite(rows: pd.DataFrame, columns: Sequence[str]) -> bool:
    """The table has every column in `columns`, all finite in at least one row."""
    if not set(columns) <= set(rows.columns) or rows.empty:
        return False
    values = rows[list(columns)].to_numpy(dtype=float)
    return bool(np.isfinite(values).all(axis=1).any())


def chance_columns(rows: pd.DataFrame) -> list[str]:
    """The CHANCE_COLUMNS the table has, in that order."""
    return [column for column in CHANCE_COLUMNS if column in rows.columns]


def draw_interval(ax: Axes, x: np.ndarray, rows: pd.DataFrame, colour, label: str | None) -> bool:
    """Error bars from ci_low to ci_high at `x` (one per row of `rows`); False when absent.

    Centred on the interval, not the estimate: a percentile interval need not contain it.
    """
    if not has_finite(rows, ["ci_low", "ci_high"]):
        return False
    low, high = rows["ci_low"].to_numpy(dtype=float), rows["ci_high"].to_numpy(dtype=float)
    ax.errorbar(
        x, (low + high) / 2, yerr=(high - low) / 2, fmt="none", ecolor=colour, elinewidth=1.2, capsize=3, label=label
    )
    return True


def draw_null(ax: Axes, x: np.ndarray, rows: pd.DataFrame, label: str | None, colour=NULL_COLOUR) -> bool:
    """The null's interval as a band and its estimate as a thin line; False when absent."""
    if not has_finite(rows, ["null", "null_ci_low", "null_ci_high"]):
        return False
    ax.fill_between(x, rows["null_ci_low"], rows["null_ci_high"], color=colour, alpha=0.3, linewidth=0, label=label)
    ax.plot(x, rows["null"], color=colour, linewidth=1.0)
    return True


def draw_init(ax: Axes, x: np.ndarray, rows: pd.DataFrame, colour="black", label: str | None = INIT_LABEL) -> bool:
    """The step-0 baseline as a dotted line; False when absent."""
    if not has_finite(rows, ["init"]):
        return False
    ax.plot(x, rows["init"], linestyle=":", linewidth=1.4, color=colour, label=label)
    return True
