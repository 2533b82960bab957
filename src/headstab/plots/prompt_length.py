"""Layer stability by prompt length (paper §4.4.2, Fig. 5 / B.4)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from headstab.plots import STABILITY_LABEL, layer_ticks, new_figure, save_figure
from headstab.plots.intervals import has_finite

__all__ = ["plot_prompt_length"]

CI = ["ci_low", "ci_high"]
NULL = ["null", "null_ci_low", "null_ci_high"]


def _lines(ax: Axes, data: pd.DataFrame, value: str, band: list[str] | None, palette: list, **style) -> None:
    """One line of data[value] per prompt length, over a band data[band[0]]..data[band[1]] when given."""
    x = data.index.to_numpy() + 1
    for colour, length in zip(palette, data[value].columns):
        if band:
            ax.fill_between(x, data[band[0]][length], data[band[1]][length], color=colour, alpha=0.15, linewidth=0)
        ax.plot(x, data[value][length], marker="o", markersize=4, color=colour, label=f"{length} words", **style)


def plot_prompt_length(table: pd.DataFrame, path: str | Path, arch: str, confidence: float = 0.95) -> pd.DataFrame:
    """Layer-wise stability, one line per prompt length (§4.4.2, Fig. 5 / B.4).

    table: prompt_length, layer, mean, std (+ anchor_seed, and the interval and null columns
    ci_low, ci_high, null, null_ci_low, null_ci_high) from `prompt_length_table`. With the null, a
    second panel on the same y axis shows it per length (dashed, same colours), each line over its
    interval as a band; the observed lines get their bootstrap interval as a band when present.
    Returns the drawn data: [layer] x (value, prompt_length), value "mean" and, when present, the
    interval and null columns.
    """
    if table.empty:
        raise ValueError("prompt-length table is empty")
    ci, null = has_finite(table, CI), has_finite(table, NULL)
    values = ["mean", *(CI if ci else []), *(NULL if null else [])]
    data = table.pivot(index="layer", columns="prompt_length", values=values).sort_index()
    n_layers, lengths = len(data), data["mean"].columns
    palette = sns.color_palette("crest", len(lengths))
    width = max(5.0, 2.5 + 0.45 * n_layers)
    figure = new_figure((2 * width - 1.5 if null else width, 3.8))
    axes = figure.subplots(1, 2, sharey=True) if null else [figure.add_subplot()]
    _lines(axes[0], data, "mean", CI if ci else None, palette)
    if ci or null:
        axes[0].set_title("observed" + (f", bands: {confidence:.0%} CI" if ci else ""), fontsize=9)
    if null:
        _lines(axes[1], data, "null", NULL[1:], palette, linestyle="--")
        axes[1].set_title(f"prompt-permutation null, bands: {confidence:.0%} CI", fontsize=9)
    for ax in axes:
        layer_ticks(ax, n_layers)
    axes[0].set_ylabel(STABILITY_LABEL)
    axes[-1].legend(title="prompt length", fontsize=7, title_fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    anchor = table["anchor_seed"].iloc[0] if "anchor_seed" in table.columns else "?"
    figure.suptitle(
        f"{arch}: layer stability by prompt length (§4.4.2, Fig. 5 / B.4)\nanchor seed {anchor}", fontsize=10
    )
    save_figure(figure, path)
    return data
