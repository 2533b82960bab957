"""Stability gap and depth of the extreme layers across architectures (paper §4.6, Fig. 7-8).

Every architecture is placed at its depth; hue encodes the number of heads, shade the optimizer
(dark Adam, light AdamW), the marker MLP (circle) or attention-only (triangle).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from headstab.plots import ARCHITECTURE_MARKERS, new_figure, save_figure

__all__ = ["plot_extreme_layer_depth", "plot_stability_gap"]


_HEAD_CMAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds")
_OPTIMIZER_SHADE = {"Adam": 0.85, "AdamW": 0.5}


def _depth_encoding(summary: pd.DataFrame) -> tuple[dict, dict]:
    """Colour per (n_heads, optimizer) (hue by heads, shade by optimizer) and x-offset per group."""
    heads = sorted(summary["n_heads"].unique())
    colours = {}
    for i, n_heads in enumerate(heads):
        cmap = matplotlib.colormaps[_HEAD_CMAPS[i % len(_HEAD_CMAPS)]]
        for optimizer, shade in _OPTIMIZER_SHADE.items():
            colours[(n_heads, optimizer)] = cmap(shade)
    # Groups present at each depth sit side by side around that depth's tick, so no gaps appear.
    offsets = {}
    for depth, rows in summary.groupby("n_layers"):
        keys = rows[["n_heads", "optimizer", "attention_only"]].drop_duplicates()
        groups = sorted(keys.itertuples(index=False, name=None))
        spacing = min(0.2, 0.8 / len(groups))
        for i, group in enumerate(groups):
            offsets[(depth,) + group] = (i - (len(groups) - 1) / 2) * spacing
    return colours, offsets


def _null_marks(ax, summary: pd.DataFrame, x_of: dict, offsets: dict) -> None:
    """Per architecture, ΔS of the prompt-permutation null (the range of the layers' chance floors): a grey bar
    from its smallest to its largest anchor beside the architecture's marker, a tick at its mean."""
    keys = ["architecture", "n_layers", "n_heads", "optimizer", "attention_only"]
    chance = summary.groupby(keys)["delta_s_prompt_null"].agg(["mean", "min", "max"]).reset_index()
    for row in chance.itertuples(index=False):
        x = x_of[row.n_layers] + offsets[(row.n_layers, row.n_heads, row.optimizer, row.attention_only)] + 0.05
        ax.plot([x, x], [row.min, row.max], color="0.55", linewidth=1.6, solid_capstyle="butt", zorder=1)
        ax.plot([x], [row.mean], marker="_", color="0.3", markersize=8, zorder=1)


def _depth_panel(
    ax, summary: pd.DataFrame, value: str, colours: dict, offsets: dict, null: bool = False
) -> pd.DataFrame:
    depths = sorted(summary["n_layers"].unique())
    x_of = {d: i for i, d in enumerate(depths)}
    means = (
        summary.groupby(["architecture", "n_layers", "n_heads", "optimizer", "attention_only"])[value]
        .agg(mean="mean", std=lambda x: x.std(ddof=0), n="count")
        .reset_index()
    )
    for row in means.itertuples(index=False):
        key = (row.n_layers, row.n_heads, row.optimizer, row.attention_only)
        x = x_of[row.n_layers] + offsets[key]
        colour = colours[(row.n_heads, row.optimizer)]
        points = summary.loc[summary["architecture"] == row.architecture, value]
        ax.scatter(
            np.full(len(points), x),
            points,
            color=colour,
            marker=ARCHITECTURE_MARKERS[bool(row.attention_only)],
            s=12,
            alpha=0.45,
            linewidth=0,
        )
        ax.errorbar(
            x,
            row.mean,
            yerr=row.std,
            fmt=ARCHITECTURE_MARKERS[bool(row.attention_only)],
            color=colour,
            markeredgecolor="black",
            markeredgewidth=0.6,
            markersize=8,
            ecolor="black",
            elinewidth=0.8,
            capsize=2,
        )
    if null:
        _null_marks(ax, summary, x_of, offsets)
    ax.set_xticks(range(len(depths)), [str(d) for d in depths])
    ax.set_xlabel("architecture depth L (number of layers)")
    return means


def _depth_legend(figure: Figure, summary: pd.DataFrame, colours: dict, null: bool = False) -> None:
    handles = []
    for (n_heads, optimizer), colour in colours.items():
        if ((summary["n_heads"] == n_heads) & (summary["optimizer"] == optimizer)).any():
            handles.append(
                Line2D(
                    [], [], marker="s", linestyle="", color=colour, markersize=8, label=f"{n_heads} heads, {optimizer}"
                )
            )
    for attention_only, marker in ARCHITECTURE_MARKERS.items():
        if (summary["attention_only"] == attention_only).any():
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=marker,
                    linestyle="",
                    color="grey",
                    markeredgecolor="black",
                    markersize=8,
                    label="attention-only" if attention_only else "with MLP",
                )
            )
    handles.append(
        Line2D([], [], marker="o", linestyle="", color="grey", alpha=0.45, markersize=4, label="one anchor (small)")
    )
    handles.append(
        Line2D([], [], marker="o", linestyle="-", color="black", markersize=0, label="mean ±1 s.d. over anchors")
    )
    if null:
        handles.append(
            Line2D(
                [], [], marker="_", linestyle="-", color="0.45", markersize=8, label="ΔS of the prompt-permutation null"
            )
        )
    figure.legend(handles=handles, loc="outside right center", fontsize=7, frameon=False)


def _check_summary(summary: pd.DataFrame, needed: tuple[str, ...]) -> None:
    missing = [c for c in needed if c not in summary.columns]
    if missing:
        raise ValueError(f"stability-gap summary lacks columns {missing}; has {list(summary.columns)}")


_SUMMARY_COLUMNS = ("architecture", "n_layers", "n_heads", "optimizer", "attention_only", "anchor_seed")


def plot_stability_gap(summary: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """ΔS = S_lmax - S_lmin against depth for every architecture and anchor (§4.6, Fig. 7).

    summary: `stability_gap_table` rows of all architectures with architecture, n_layers, n_heads,
    optimizer ('Adam' | 'AdamW'), attention_only added. Marker: MLP (circle) or attention-only
    (triangle); hue: number of heads; shade: optimizer (dark Adam, light AdamW). With the
    delta_s_prompt_null column, a grey bar beside each architecture: ΔS of the prompt-permutation null, the
    part of ΔS the layers' chance floors give (mean and range over anchors).
    Returns per architecture: mean, std, n of delta_s.
    """
    _check_summary(summary, _SUMMARY_COLUMNS + ("delta_s",))
    null = "delta_s_prompt_null" in summary.columns and summary["delta_s_prompt_null"].notna().any()
    colours, offsets = _depth_encoding(summary)
    figure = new_figure((8.5, 4.2))
    ax = figure.add_subplot()
    means = _depth_panel(ax, summary, "delta_s", colours, offsets, null=null)
    ax.set_ylabel("stability gap ΔS = S(l_max) − S(l_min)\n(cosine similarity)")
    ax.set_title("Stability gap across architectures (§4.6, Fig. 7)", fontsize=10)
    _depth_legend(figure, summary, colours, null=null)
    save_figure(figure, path)
    return means


def plot_extreme_layer_depth(summary: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Relative depth r = l/L of the most and least stable layer (§4.6, Fig. 8).

    summary: as for `plot_stability_gap`, with r_max and r_min. Returns per architecture and
    extreme ('r_max' | 'r_min'): mean, std, n.
    """
    _check_summary(summary, _SUMMARY_COLUMNS + ("r_max", "r_min"))
    colours, offsets = _depth_encoding(summary)
    figure = new_figure((11, 4.2))
    axes = figure.subplots(1, 2, sharey=True)
    drawn = []
    for ax, value, title in zip(axes, ("r_max", "r_min"), ("most stable layer", "least stable layer")):
        drawn.append(_depth_panel(ax, summary, value, colours, offsets).assign(extreme=value))
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 1.08)
    axes[0].set_ylabel("relative depth r = l / L (l counted from 1)")
    figure.suptitle("Position of the extreme layers (§4.6, Fig. 8)", fontsize=10)
    _depth_legend(figure, summary, colours)
    save_figure(figure, path)
    return pd.concat(drawn, ignore_index=True)
