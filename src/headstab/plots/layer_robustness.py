"""Layer drop and swap robustness by relative depth ("stages") and against layer stability (docs/beyond_the_paper.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headstab.plots import layer_palette, new_figure, save_figure

__all__ = ["plot_robustness_vs_stability", "plot_robustness_stages"]

LABELS = {
    "top1_agreement": "top-1 agreement with the intact model",
    "delta_ppl": "ΔPPL (held-out)",
    "kl_divergence": "KL(intact ‖ condition), nats per token",
}


def plot_robustness_vs_stability(table: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """KL divergence to the intact model, top-1 agreement and ΔPPL against layer stability, one point per refit and
    condition, coloured by layer; drops as circles, swaps as triangles. table: `robustness_with_stability` rows."""
    n_layers = int(table["layer"].max()) + 1  # the drops reach layer L - 1
    palette = layer_palette(max(n_layers, 1))
    figure = new_figure((13.5, 3.8))
    for ax, metric in zip(figure.subplots(1, 3), ("kl_divergence", "top1_agreement", "delta_ppl"), strict=True):
        for (condition, layer), rows in table.groupby(["condition", "layer"], sort=True):
            ax.scatter(
                rows["stability"],
                rows[metric],
                color=palette[int(layer)],
                marker="o" if condition == "drop" else "^",
                s=20,
                edgecolor="black",
                linewidth=0.3,
                label=f"{condition} {layer + 1}" if condition == "drop" else f"swap {layer + 1}↔{layer + 2}",
            )
        ax.set_xlabel("layer stability (cosine similarity; swap: mean of the two layers)")
        ax.set_ylabel(LABELS[metric])
        if metric != "top1_agreement":
            ax.set_yscale(
                "symlog", linthresh=1.0 if metric == "delta_ppl" else 0.01
            )  # a dropped first layer costs 100x a later one
    ax.legend(fontsize=6, ncol=2)
    figure.suptitle(f"{arch}: layer drop / swap robustness vs layer stability, one point per refit", fontsize=9)
    save_figure(figure, path)
    return table


def plot_robustness_stages(summary: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Mean KL divergence to the intact model (top row) and top-1 agreement (bottom row) over refits, with interval
    bands, by relative depth r = l / L, one line per architecture; left drops, right swaps (r of the first layer of
    the pair), as Lad et al. (2024, Fig. 5). summary: architecture + `robustness_by_layer` rows."""
    metrics = ("kl_divergence", "top1_agreement")
    figure = new_figure((9.5, 7.0))
    axes = figure.subplots(2, 2, sharex=True, sharey="row")
    for row, metric in zip(axes, metrics, strict=True):
        rows = summary[summary["metric"] == metric]
        for ax, condition in zip(row, ("drop", "swap"), strict=True):
            for arch, lines in rows[rows["condition"] == condition].groupby("architecture", sort=True):
                lines = lines.sort_values("relative_depth")
                ax.plot(lines["relative_depth"], lines["mean"], marker="o", label=arch)
                ax.fill_between(lines["relative_depth"], lines["ci_low"], lines["ci_high"], alpha=0.15)
            ax.set_xlim(0, 1.05)
        row[0].set_ylabel(LABELS[metric])
    axes[0, 0].set_yscale("symlog", linthresh=0.01)  # a dropped first layer diverges far more than a later one
    for ax, condition in zip(axes[1], ("drop", "swap"), strict=True):
        ax.set_xlabel("relative depth r = l / L" + (" (first layer of the pair)" if condition == "swap" else ""))
    axes[0, 0].set_title("drop one layer", fontsize=9)
    axes[0, 1].set_title("swap adjacent layers", fontsize=9)
    axes[0, 1].legend(fontsize=6, ncol=2)
    save_figure(figure, path)
    return summary[summary["metric"].isin(metrics)]
