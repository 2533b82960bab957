"""Weight norms vs layer stability (paper §4.4.1, Table B.5): W_Q norm against stability, and r per matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import STABILITY_LABEL, layer_palette, new_figure, save_figure
from headstab.sections.weight_norms import MATRIX_ORDER
from headstab.table_rows import select_rows

__all__ = ["plot_weight_norm_correlation"]


def plot_weight_norm_correlation(
    norms: pd.DataFrame,
    layer_stability: pd.DataFrame,
    correlations: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    scope: str = "same_layer",
    attention_norm: str = "per_head_mean",
) -> pd.DataFrame:
    """Query-weight norm against layer stability, and r for every weight matrix (§4.4.1, Table B.5).

    norms: seed, layer, matrix, frobenius_norm; layer_stability: anchor_seed, layer, mean (+
    promptset, scope); correlations: anchor_seed, matrix, pearson_r (`norm_stability_correlation`).
    attention_norm: how the attention norms were taken (`headstab.sections.weight_norms.layer_weight_norms`), for the label.
    Returns the scatter data: seed, layer, frobenius_norm (W_Q), mean (stability).
    """
    norm_label = "mean over heads" if attention_norm == "per_head_mean" else "whole layer"
    stab = select_rows(layer_stability, "layer stability", promptset=promptset, scope=scope)
    q = select_rows(norms, "weight norms", matrix="W_Q")
    data = q.merge(stab[["anchor_seed", "layer", "mean"]], left_on=["seed", "layer"], right_on=["anchor_seed", "layer"])
    data = data[["seed", "layer", "frobenius_norm", "mean"]]
    n_layers = int(data["layer"].max()) + 1
    palette = layer_palette(n_layers)

    figure = new_figure((10, 4.0))
    scatter_ax, bar_ax = figure.subplots(1, 2, width_ratios=[1, 1.2])
    for layer in range(n_layers):
        rows = data[data["layer"] == layer]
        scatter_ax.scatter(
            rows["frobenius_norm"],
            rows["mean"],
            color=palette[layer],
            s=28,
            edgecolor="black",
            linewidth=0.3,
            label=f"layer {layer + 1}",
        )
    scatter_ax.set_xlabel(f"Frobenius norm of W_Q, {norm_label} (weight units)")
    scatter_ax.set_ylabel(STABILITY_LABEL)
    scatter_ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1, title="one point per refit", title_fontsize=7)
    scatter_ax.set_title("W_Q norm vs stability", fontsize=9)

    order = [m for m in MATRIX_ORDER if m in set(correlations["matrix"])]
    summary = correlations.groupby("matrix")["pearson_r"].agg(["mean", "std"]).reindex(order)
    x = np.arange(len(order))
    bar_ax.bar(
        x,
        summary["mean"],
        yerr=summary["std"].fillna(0),
        color="tab:grey",
        alpha=0.6,
        capsize=3,
        label="mean ±1 s.d. over anchors",
    )
    for i, matrix in enumerate(order):
        r = correlations.loc[correlations["matrix"] == matrix, "pearson_r"].to_numpy()
        bar_ax.scatter(
            np.full(len(r), i) + np.linspace(-0.15, 0.15, len(r)),
            r,
            s=10,
            color="black",
            zorder=3,
            label="one anchor" if i == 0 else None,
        )
    bar_ax.axhline(0, color="black", linewidth=0.6)
    bar_ax.set_xticks(x, order)
    bar_ax.set_ylim(-1.05, 1.05)
    bar_ax.set_xlabel("weight matrix")
    bar_ax.set_ylabel("Pearson r with layer stability (over layers)")
    bar_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    bar_ax.set_title("correlation per matrix", fontsize=9)
    figure.suptitle(f"{arch}: weight norms vs layer stability (§4.4.1, Table B.5; prompts: {promptset})", fontsize=10)
    save_figure(figure, path)
    return data.reset_index(drop=True)
