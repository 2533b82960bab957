"""The noise ceiling beside head stability: per layer, pooled head stability (its ceiling is 1 by construction)
and, per head type, the within-refit reliability, the cross-seed agreement and the attenuation-corrected
agreement of type labels and scores, with intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES
from headstab.plots import STABILITY_LABEL, layer_ticks, new_figure, save_figure
from headstab.plots.head_types import RULE_LABELS, TYPE_LABELS

__all__ = ["CEILING_LINES", "plot_noise_ceiling"]

# Per row of panels (labels, scores): (statistic, legend, marker, colour).
CEILING_LINES = {
    "label": (
        ("typed_share", "heads with the type (either half)", "x", "tab:green"),
        ("reliability_label", "within refit (two probe halves)", "o", "tab:gray"),
        ("cross_seed_label", "across refits (best match)", "s", "tab:blue"),
        ("corrected_label", "across / within", "^", "tab:orange"),
    ),
    "score": (
        ("reliability_score", "within refit, split-half r", "o", "tab:gray"),
        ("cross_seed_score", "across refits, r", "s", "tab:blue"),
        ("corrected_score", "attenuation-corrected r", "^", "tab:orange"),
    ),
}


def _line(ax, rows: pd.DataFrame, label: str, marker: str, colour: str) -> None:
    estimate = rows["estimate"].to_numpy(dtype=float)
    low, high = rows["ci_low"].to_numpy(dtype=float), rows["ci_high"].to_numpy(dtype=float)
    errors = np.nan_to_num(np.clip(np.stack([estimate - low, high - estimate]), 0, None))
    x = rows["layer"].to_numpy() + 1
    ax.errorbar(x, estimate, yerr=errors, marker=marker, color=colour, label=label, capsize=2)


def plot_noise_ceiling(ceiling: pd.DataFrame, pooled: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """A first column: same-layer pooled layer stability by layer with its interval and its ceiling of 1; then one
    column per head type: label agreement (top) and score correlation (bottom) within a refit, across refits and
    corrected, by layer with intervals.

    ceiling: CEILING_COLUMNS (`headstab.sections.noise_ceiling`); pooled: layer_stability_pooled rows of one prompt
    set (scope same_layer used). Returns the ceiling rows drawn.
    """
    wanted = [statistic for lines in CEILING_LINES.values() for statistic, *_ in lines]
    rows = ceiling[ceiling["statistic"].isin(wanted) & ceiling["type"].isin(HEAD_TYPES)]
    n_layers = int(ceiling["layer"].max()) + 1
    figure = new_figure((2.8 * (len(HEAD_TYPES) + 1), 6.2))
    grid = figure.subplots(2, len(HEAD_TYPES) + 1, squeeze=False)
    same = pooled[pooled["scope"] == "same_layer"].sort_values("layer").rename(columns={"stability": "estimate"})
    _line(grid[0, 0], same, "pooled over refits", "o", "tab:blue")
    grid[0, 0].axhline(1.0, color="black", linestyle="--", linewidth=0.8, label="ceiling: a refit with itself")
    grid[0, 0].set_ylabel(STABILITY_LABEL)
    grid[0, 0].set_title("head stability", fontsize=9)
    grid[0, 0].legend(fontsize=6)
    layer_ticks(grid[0, 0], n_layers)
    grid[1, 0].axis("off")
    for column, name in enumerate(HEAD_TYPES, start=1):
        for row, (kind, lines) in enumerate(CEILING_LINES.items()):
            ax = grid[row, column]
            for statistic, label, marker, colour in lines:
                chosen = rows[(rows["type"] == name) & (rows["statistic"] == statistic)].sort_values("layer")
                _line(ax, chosen, label, marker, colour)
            ax.axhline(1.0, color="black", linestyle="--", linewidth=0.5)
            ax.axhline(0.0, color="black", linewidth=0.5)
            layer_ticks(ax, n_layers)
            ax.set_title(f"{TYPE_LABELS[name]}: {kind}s", fontsize=9)
    grid[0, 1].set_ylabel("type-label agreement")
    grid[1, 1].set_ylabel("score correlation")
    grid[0, 1].legend(fontsize=6)
    grid[1, 1].legend(fontsize=6)
    rule = ceiling["threshold_rule"].iloc[0]
    figure.suptitle(
        f"{arch}: noise ceiling of head types, {RULE_LABELS.get(rule, rule)} (beyond the paper)", fontsize=10
    )
    save_figure(figure, path)
    return rows
