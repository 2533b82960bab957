"""Layer stability by prompt length (paper §4.4.2, Fig. 5 / B.4)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from headstab.plots import STABILITY_LABEL, layer_ticks, new_figure, save_figure

__all__ = ["plot_prompt_length"]


def plot_prompt_length(table: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """Layer-wise stability, one line per prompt length (§4.4.2, Fig. 5 / B.4).

    table: prompt_length, layer, mean, std (+ anchor_seed) from `prompt_length_table`.
    Returns the drawn data: [layer] x [prompt_length] means.
    """
    if table.empty:
        raise ValueError("prompt-length table is empty")
    data = table.pivot(index="layer", columns="prompt_length", values="mean").sort_index()
    n_layers = len(data)
    palette = sns.color_palette("crest", data.shape[1])
    figure = new_figure((max(5.0, 2.5 + 0.45 * n_layers), 3.8))
    ax = figure.add_subplot()
    x = data.index.to_numpy() + 1
    for colour, length in zip(palette, data.columns):
        ax.plot(x, data[length], marker="o", markersize=4, color=colour, label=f"{length} words")
    layer_ticks(ax, n_layers)
    ax.set_ylabel(STABILITY_LABEL)
    ax.legend(title="prompt length", fontsize=7, title_fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    anchor = table["anchor_seed"].iloc[0] if "anchor_seed" in table.columns else "?"
    ax.set_title(f"{arch}: layer stability by prompt length (§4.4.2, Fig. 5 / B.4)\nanchor seed {anchor}", fontsize=10)
    save_figure(figure, path)
    return data
