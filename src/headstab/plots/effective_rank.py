"""Per-head effective rank (participation ratio) by layer and against head stability (docs/beyond_the_paper.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import layer_palette, layer_ticks, new_figure, save_figure

__all__ = ["family_label", "plot_rank_by_layer", "plot_rank_vs_stability"]


def family_label(facts: dict) -> str:
    """An architecture family: MLP or attention-only, and the optimizer (depth and heads vary within one)."""
    return f"{'attention-only' if facts['attention_only'] else 'with MLP'}, {facts['optimizer']}"


def plot_rank_vs_stability(pr: pd.DataFrame, head_stability: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """Scatter of the uncentred PR (positions "all") against head stability, one point per head of each refit,
    coloured by layer: the figure reads PR ≈ 1 as a content-independent head, which holds uncentred only.

    pr: seed, positions, layer, head, pr_uncentred; head_stability: anchor_seed, layer, head, stability (one set
    and scope). Returns the rows drawn: seed, layer, head, effective_rank (x), stability (y).
    """
    stability = head_stability.rename(columns={"anchor_seed": "seed"})[["seed", "layer", "head", "stability"]]
    rows = pr[pr["positions"] == "all"].merge(stability, on=["seed", "layer", "head"])
    rows = rows.assign(effective_rank=rows["pr_uncentred"])[["seed", "layer", "head", "effective_rank", "stability"]]
    n_layers = int(rows["layer"].max()) + 1
    palette = layer_palette(n_layers)
    figure = new_figure((5.2, 4.0))
    ax = figure.subplots()
    for layer in range(n_layers):
        chosen = rows[rows["layer"] == layer]
        ax.scatter(
            chosen["effective_rank"],
            chosen["stability"],
            color=palette[layer],
            s=18,
            edgecolor="black",
            linewidth=0.3,
            label=f"layer {layer + 1}",
        )
    ax.axvline(1.0, color="0.6", linewidth=0.6)
    ax.set_xlabel("entropy effective rank of the uncentred hook_z (1: one output, content-independent)")
    ax.set_ylabel("head stability (cosine similarity)")
    ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1, title="one point per head and refit", title_fontsize=7)
    ax.set_title(f"{arch}: effective rank vs stability", fontsize=9)
    save_figure(figure, path)
    return rows


def plot_rank_by_layer(summary: pd.DataFrame, facts: dict[str, dict], path: str | Path) -> pd.DataFrame:
    """PR by layer, one panel per architecture family, one line per architecture (mean over heads and refits,
    refit-resampled interval as a band).

    summary: architecture, positions, layer, statistic, estimate, ci_low, ci_high (rows of statistic pr_mean used,
    positions "all"). facts: {arch: architecture_facts}. Returns the rows drawn.
    """
    rows = summary[(summary["statistic"] == "pr_mean") & (summary["positions"] == "all")].copy()
    rows["family"] = rows["architecture"].map(lambda arch: family_label(facts[arch]))
    families = sorted(rows["family"].unique())
    figure = new_figure((4.0 * max(len(families), 1), 3.6))
    axes = np.atleast_1d(figure.subplots(1, max(len(families), 1), sharey=True))
    for ax, family in zip(axes, families, strict=False):
        chosen = rows[rows["family"] == family]
        for arch, lines in chosen.groupby("architecture", sort=True):
            lines = lines.sort_values("layer")
            x = lines["layer"].to_numpy() + 1
            ax.plot(x, lines["estimate"], marker="o", label=arch)
            ax.fill_between(x, lines["ci_low"], lines["ci_high"], alpha=0.2)
        layer_ticks(ax, int(chosen["layer"].max()) + 1)
        ax.set_title(family, fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("participation ratio of hook_z")
    save_figure(figure, path)
    return rows
