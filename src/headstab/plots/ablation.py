"""Ablation importance vs head stability (paper §4.8, Fig. 10 / B.9)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import layer_palette, layer_ticks, new_figure, save_figure

__all__ = ["plot_ablation_correlation"]


def plot_ablation_correlation(
    table: pd.DataFrame,
    per_layer: pd.DataFrame,
    trend: Mapping[str, float],
    path: str | Path,
    arch: str,
) -> pd.DataFrame:
    """Ablation importance vs head stability (§4.8, Fig. 10 / B.9).

    table: seed, layer, head, delta_ppl, stability (`ablation_table`, the paper's anchor first); per_layer,
    trend: `ablation_correlation(table)`. The scatter shows the first anchor's heads; the right panel its
    Pearson r and Spearman rho per layer, and the correlation pooled over anchors when there are several.
    Returns per_layer with the trend's fitted r added.
    """
    if "seed" in table.columns:
        table = table[table["seed"] == table["seed"].iloc[0]]
    n_layers = int(table["layer"].max()) + 1
    palette = layer_palette(n_layers)
    figure = new_figure((10, 3.9))
    scatter_ax, r_ax = figure.subplots(1, 2)
    for layer in range(n_layers):
        rows = table[table["layer"] == layer]
        scatter_ax.scatter(
            rows["stability"],
            rows["delta_ppl"],
            color=palette[layer],
            s=22,
            edgecolor="black",
            linewidth=0.3,
            label=f"layer {layer + 1}",
        )
    scatter_ax.axhline(0, color="black", linewidth=0.6)
    scatter_ax.set_xlabel("head stability (cosine similarity)")
    scatter_ax.set_ylabel("ΔPPL = ablated − baseline (perplexity)")
    scatter_ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1, title="one point per head", title_fontsize=7)
    seed = table["seed"].iloc[0] if "seed" in table.columns else "?"
    scatter_ax.set_title(f"zero-ablating hook_z, anchor seed {seed}", fontsize=9)

    data = per_layer.copy()
    x = data["layer"].to_numpy() + 1
    r_ax.axhline(0, color="black", linewidth=0.6)
    r_ax.plot(x, data["pearson_r"], marker="o", color="tab:red", label="Pearson r per layer")
    if "spearman_r" in data.columns:
        r_ax.plot(x, data["spearman_r"], marker="s", color="tab:blue", label="Spearman ρ per layer")
    if "n_anchors" in data.columns and data["n_anchors"].max() > 1:
        r_ax.plot(
            x,
            data["pooled_pearson_r"],
            marker="^",
            linestyle=":",
            color="tab:red",
            label=f"Pearson r pooled over {int(data['n_anchors'].max())} anchors",
        )
    if np.isfinite(trend.get("slope", np.nan)):
        data["trend_r"] = trend["intercept"] + trend["slope"] * data["layer"]
        r_ax.plot(
            x,
            data["trend_r"],
            linestyle="--",
            color="black",
            label=f"linear trend (slope {trend['slope']:+.3f} per layer)",
        )
    layer_ticks(r_ax, n_layers)
    r_ax.set_ylim(-1.05, 1.05)
    r_ax.set_ylabel("correlation (stability, ΔPPL)")
    r_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    r_ax.set_title("correlation per layer", fontsize=9)
    figure.suptitle(f"{arch}: ablation importance vs head stability (§4.8, Fig. 10 / B.9)", fontsize=10)
    save_figure(figure, path)
    return data
