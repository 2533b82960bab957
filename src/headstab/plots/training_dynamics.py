"""Stability along training: pooled layer stability against training step, one line per layer."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headstab.plots import STABILITY_LABEL, layer_palette, new_figure, save_figure

__all__ = ["plot_stability_along_training"]


def plot_stability_along_training(table: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """Layer stability against training step: one line per layer with its bootstrap interval as a shaded
    band, and the prompt-permutation null as a grey band.

    table: TRAINING_DYNAMICS_COLUMNS (headstab.sections.training_dynamics). Returns the drawn data:
    [step] x [layer] stability.
    """
    if table.empty:
        raise ValueError("stability-along-training table is empty")
    data = table.pivot(index="step", columns="layer", values="stability").sort_index()
    figure = new_figure((6.4, 3.8))
    ax = figure.add_subplot()
    for colour, layer in zip(layer_palette(data.shape[1]), data.columns):
        rows = table[table["layer"] == layer].sort_values("step")
        # The layer's null (its interval in grey, its estimate dashed in the layer's colour), then its stability.
        ax.fill_between(rows["step"], rows["null_ci_low"], rows["null_ci_high"], color="0.6", alpha=0.3, linewidth=0)
        ax.plot(
            rows["step"],
            rows["null"],
            color=colour,
            linestyle="--",
            linewidth=1,
            label="null (prompts permuted)" if layer == data.columns[0] else "_nolegend_",
        )
        ax.fill_between(rows["step"], rows["ci_low"], rows["ci_high"], color=colour, alpha=0.2, linewidth=0)
        ax.plot(data.index, data[layer], marker="o", markersize=4, color=colour, label=f"layer {layer + 1}")
    ax.set_xticks(data.index)
    ax.set_xlabel("training step (0: initialisation)")
    ax.set_ylabel(STABILITY_LABEL)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    confidence = f"{table['n_boot'].iloc[0]} resamples" if "n_boot" in table.columns else ""
    ax.set_title(
        f"{arch}: layer stability along training ({table['promptset'].iloc[0]} prompts)\n"
        f"bands: bootstrap interval ({confidence}); grey, dashed: null",
        fontsize=9,
    )
    save_figure(figure, path)
    return data
