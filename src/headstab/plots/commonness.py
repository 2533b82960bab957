"""Within-layer commonness (paper Fig. 4, Eq. 10) from `tables/commonness.csv`, with its chance control.

The heatmap and the layer means are the paper's figure (the head itself included). A third panel, drawn
when the table holds the prompt-permutation null's columns (`headstab.statistics.controls`), gives the
layer means of commonness above its null with and without the head's match with itself: the self term adds
(1 - self_null) / H, most for heads whose pattern moves with the prompt.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from headstab.plots import new_figure, save_figure
from headstab.plots.stability import (
    SIMILARITY_LABEL,
    _first,
    _heads_by_layers,
    _heads_layers_heatmap,
    _heatmap_size,
    _one_based,
)
from headstab.table_rows import select_rows

__all__ = ["ABOVE_NULL_LINES", "plot_commonness"]

# (column, label, colour) of the above-null panel.
ABOVE_NULL_LINES = (
    ("commonness_above_null", "Eq. 10, self included", "tab:grey"),
    ("commonness_excl_self_above_null", "without self", "tab:red"),
)


def _layer_band(ax: Axes, per_seed: pd.DataFrame, label: str, color: str, band: bool) -> tuple[np.ndarray, pd.Series]:
    """Mean over seeds (rows) of each layer (columns), with a +-1 s.d. band; returns (x, mean)."""
    x = np.asarray(_one_based(per_seed.columns))
    mean, std = per_seed.mean(axis=0), per_seed.std(axis=0, ddof=0)
    if band:
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    ax.plot(x, mean, marker="o", color=color, label=label)
    ax.set_xticks(x)
    ax.set_xlabel("layer")
    return x, mean


def plot_commonness(
    commonness: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    column: str = "commonness",
) -> dict[str, pd.DataFrame]:
    """Within-layer commonness (Fig. 4): heads x layers for the first seed, layer means across seeds, and
    (with the null's columns) the layer means above the null with and without self.

    commonness: COMMONNESS_COLUMNS, merged with the interval table's in the workflow; column: "commonness"
    (self included, the paper's Eq. 10) or "commonness_excl_self". Returns {"matrix": the drawn [head, layer]
    matrix of the first seed, "above_null": [layer, column] means over seeds of ABOVE_NULL_LINES' columns
    (empty without them)}.
    """
    rows = select_rows(commonness, "commonness table", promptset=promptset)
    seed = _first(rows, "seed")
    matrix = _heads_by_layers(rows[rows["seed"] == seed], column)
    above = [name for name, _, _ in ABOVE_NULL_LINES if name in rows.columns]
    width, height = _heatmap_size(*matrix.shape[::-1])
    panels = [width, 4.2] + ([4.2] if above else [])
    figure = new_figure((sum(panels), max(height, 3.4)))
    axes = figure.subplots(1, len(panels), width_ratios=panels)
    label = "commonness" + (" excl. self" if column == "commonness_excl_self" else "")
    _heads_layers_heatmap(axes[0], matrix, f"{label} (mean {SIMILARITY_LABEL})", cmap="rocket")
    axes[0].set_title(f"seed {seed} (first seed)", fontsize=9)
    per_seed = rows.groupby(["seed", "layer"])[column].mean().unstack("layer")
    _layer_band(axes[1], per_seed, f"layer mean; ±1 s.d. across {len(per_seed)} seeds", "tab:red", band=True)
    axes[1].set_ylabel(f"{label} ({SIMILARITY_LABEL})")
    axes[1].legend(fontsize=8)
    axes[1].set_title("all seeds", fontsize=9)
    means = {}
    for name, line_label, color in ABOVE_NULL_LINES if above else ():
        per_seed = rows.groupby(["seed", "layer"])[name].mean().unstack("layer")
        means[name] = _layer_band(axes[2], per_seed, line_label, color, band=True)[1]
    if above:
        axes[2].axhline(0.0, color="black", linewidth=0.8, linestyle=":")
        axes[2].set_ylabel("commonness − prompt-permutation null")
        axes[2].legend(fontsize=8)
        axes[2].set_title("above chance; ±1 s.d. across seeds", fontsize=9)
    figure.suptitle(f"{arch}: within-layer commonness (prompts: {promptset})", fontsize=10)
    save_figure(figure, path)
    return {"matrix": matrix, "above_null": pd.DataFrame(means)}
