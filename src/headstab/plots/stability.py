"""Stability figures (paper Fig. 2, 3, 12/A.5 and 20) from the tables of `headstab.stability` (Fig. 4:
`headstab.plots.commonness`).

Each function takes the table(s), the output path and the architecture name, draws on a
matplotlib `Figure` rendered by the Agg canvas (no pyplot, so no global figure state and nothing
to close), saves a PNG and returns the data it drew, so callers and tests can check the picture
against the table. Tables keep 0-based layers and heads; labels show them 1-based, as the paper does.
The paper's single-anchor views use the first seed of the table as anchor; titles say so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.collections import QuadMesh

from headstab.plots import new_figure, save_figure
from headstab.plots.intervals import chance_columns, draw_init, draw_interval, draw_null, null_label
from headstab.table_rows import select_rows

__all__ = [
    "plot_alignment_map",
    "plot_cross_layer_stability",
    "plot_head_stability",
    "plot_layer_stability",
    "plot_pair_stability",
]

SIMILARITY_LABEL = "cosine similarity"
STABILITY_CMAP = "viridis"
# The alignment map's side panel: its dispersion, and the same under the prompt-permutation null where the
# table holds it (`headstab.statistics.cross_layer_null`).
SIDE_PANEL = {
    "diagonal_share": "diagonal\nshare",
    "normalized_entropy": "norm.\nentropy",
    "diagonal_share_null": "null\nshare",
    "normalized_entropy_null": "null\nentropy",
}


def _first(table: pd.DataFrame, column: str) -> int:
    """First seed of the table, in the order the seeds were given (row order)."""
    return int(table[column].iloc[0])


def _one_based(values: pd.Index | np.ndarray) -> list[int]:
    return [int(v) + 1 for v in values]


def _heads_by_layers(rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """[head, layer] matrix of `value` (0-based index and columns)."""
    return rows.pivot(index="head", columns="layer", values=value).sort_index().sort_index(axis=1)


def _heatmap_size(n_cols: int, n_rows: int) -> tuple[float, float]:
    return (min(2.6 + 0.5 * n_cols, 16.0), min(1.8 + 0.32 * n_rows, 14.0))


def _heatmap(
    ax: Axes,
    matrix: pd.DataFrame,
    cmap: str,
    xticklabels: list[int],
    yticklabels: list[int],
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
) -> QuadMesh:
    """Draw `matrix` as a heatmap, first row on top; returns the QuadMesh (for a colorbar).

    A plain pcolormesh in seaborn's heatmap style: `sns.heatmap` redraws the whole figure to check
    tick overlap, slow for many panels.
    """
    values = matrix.to_numpy(dtype=float)
    n_rows, n_cols = values.shape
    colormap = sns.color_palette(cmap, as_cmap=True)
    mesh = ax.pcolormesh(values, cmap=colormap, vmin=vmin, vmax=vmax)
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)
    x_step = max(1, -(-n_cols // 16))  # at most about 16 labels per axis, so they never collide
    y_step = max(1, -(-n_rows // 24))
    ax.set_xticks(np.arange(0, n_cols, x_step) + 0.5, [str(v) for v in xticklabels[::x_step]])
    ax.set_yticks(np.arange(0, n_rows, y_step) + 0.5, [str(v) for v in yticklabels[::y_step]])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if annotate:
        for (row, col), value in np.ndenumerate(values):
            if np.isnan(value):
                continue
            red, green, blue, _ = mesh.cmap(mesh.norm(value))
            colour = "white" if 0.299 * red + 0.587 * green + 0.114 * blue < 0.5 else "black"
            ax.text(col + 0.5, row + 0.5, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    return mesh


def _heads_layers_heatmap(ax: Axes, matrix: pd.DataFrame, colorbar_label: str, cmap: str = STABILITY_CMAP) -> None:
    mesh = _heatmap(ax, matrix, cmap, _one_based(matrix.columns), _one_based(matrix.index))
    ax.figure.colorbar(mesh, ax=ax, label=colorbar_label)
    ax.set_xlabel("layer")
    ax.set_ylabel("head")


def plot_head_stability(
    head_table: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    scope: str = "same_layer",
) -> pd.DataFrame:
    """Heads x layers heatmap of head stability for the first seed as anchor (Fig. 2 top).

    head_table: HEAD_COLUMNS of `headstab.stability`.
    Returns the drawn [head, layer] matrix (0-based index and columns).
    """
    rows = select_rows(head_table, "head_stability table", promptset=promptset, scope=scope)
    anchor = _first(rows, "anchor_seed")
    matrix = _heads_by_layers(rows[rows["anchor_seed"] == anchor], "stability")
    figure = new_figure(_heatmap_size(*matrix.shape[::-1]))
    ax = figure.add_subplot()
    _heads_layers_heatmap(ax, matrix, f"head stability ({SIMILARITY_LABEL})")
    n_pairs = int(rows["n_pairs"].iloc[0])
    figure.suptitle(
        f"{arch}: head stability, {scope.replace('_', '-')} (prompts: {promptset})\n"
        f"anchor = first seed ({anchor}), mean best match over {n_pairs} other refits",
        fontsize=10,
    )
    save_figure(figure, path)
    return matrix


def plot_layer_stability(
    layer_table: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    scope: str = "same_layer",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Layer stability: mean +-1 std over heads for the first seed as anchor (Fig. 2 bottom).

    A lighter band shows the spread across anchors: mean +-1 std over all anchor seeds of the layer
    mean. When the table has them (`headstab.plots.intervals`), error bars give the first anchor's
    bootstrap interval, a grey band the prompt-permutation null and a dotted line the step-0 refits.
    layer_table: LAYER_COLUMNS of `headstab.stability`, optionally with the interval columns.
    Returns the drawn data: layer (0-based), mean, std (first anchor), anchors_mean, anchors_std and
    the first anchor's CHANCE_COLUMNS the table has.
    """
    rows = select_rows(layer_table, "layer_stability table", promptset=promptset, scope=scope)
    anchor = _first(rows, "anchor_seed")
    first = rows[rows["anchor_seed"] == anchor].set_index("layer").sort_index()
    across = rows.groupby("layer")["mean"].agg(anchors_mean="mean", anchors_std=lambda x: x.std(ddof=0))
    data = first[["mean", "std", *chance_columns(first)]].join(across).reset_index()
    n_anchors = rows["anchor_seed"].nunique()

    figure = new_figure((max(5.5, 3.6 + 0.45 * len(data)), 3.6))
    ax = figure.add_subplot()
    x = np.asarray(_one_based(data["layer"]))
    draw_null(ax, x, data, null_label(confidence))
    ax.fill_between(
        x,
        data["anchors_mean"] - data["anchors_std"],
        data["anchors_mean"] + data["anchors_std"],
        color="tab:orange",
        alpha=0.3,
        linewidth=0,
        label=f"±1 s.d. of layer mean across {n_anchors} anchors",
    )
    ax.fill_between(
        x,
        data["mean"] - data["std"],
        data["mean"] + data["std"],
        color="tab:blue",
        alpha=0.25,
        linewidth=0,
        label="±1 s.d. over heads (first anchor)",
    )
    ax.plot(x, data["mean"], marker="o", color="tab:blue", label=f"mean over heads, anchor seed {anchor}")
    draw_interval(ax, x, data, "navy", f"{confidence:.0%} CI (bootstrap: refits, prompts)")
    draw_init(ax, x, data)
    ax.set_xticks(x)
    ax.set_xlabel("layer")
    ax.set_ylabel(f"layer stability ({SIMILARITY_LABEL})")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(
        f"{arch}: layer stability, {scope.replace('_', '-')} (prompts: {promptset})\n"
        f"anchor = first seed ({anchor}); orange band: all anchors",
        fontsize=10,
    )
    save_figure(figure, path)
    return data


def plot_pair_stability(
    pair_table: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    scope: str = "same_layer",
) -> pd.DataFrame:
    """Per layer, anchor heads x pair refits heatmaps of best-match similarity (Fig. 12 / A.5).

    pair_table: PAIR_COLUMNS of `headstab.stability`; the anchor is the first seed.
    Returns the drawn data: index (layer, head) 0-based, one column per pair seed.
    """
    rows = select_rows(pair_table, "pair_stability table", promptset=promptset, scope=scope)
    anchor = _first(rows, "anchor_seed")
    rows = rows[rows["anchor_seed"] == anchor]
    pair_order = list(dict.fromkeys(rows["pair_seed"]))
    data = rows.pivot_table(index=["layer", "head"], columns="pair_seed", values="similarity")[pair_order]
    layers = sorted(rows["layer"].unique())
    n_heads = rows["head"].nunique()
    n_cols = min(4, len(layers))
    n_rows = -(-len(layers) // n_cols)
    width = min(18.0, n_cols * (1.4 + 0.16 * len(pair_order)) + 1.2)
    height = min(20.0, n_rows * (1.0 + 0.22 * n_heads) + 1.0)
    figure = new_figure((width, height))
    axes = np.atleast_1d(figure.subplots(n_rows, n_cols, squeeze=False)).ravel()
    low, high = float(data.min().min()), float(data.max().max())
    for ax, layer in zip(axes, layers):
        block = data.loc[layer]
        _heatmap(ax, block, STABILITY_CMAP, pair_order, _one_based(block.index), vmin=low, vmax=high)
        ax.set_title(f"layer {layer + 1}", fontsize=9)
        ax.set_xlabel("pair refit (seed)", fontsize=8)
        ax.set_ylabel("anchor head", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(layers) :]:
        ax.set_visible(False)
    mappable = axes[0].collections[0]  # every panel shares vmin/vmax, so one colorbar serves all
    figure.colorbar(mappable, ax=axes[: len(layers)].tolist(), label=f"best-match {SIMILARITY_LABEL}", shrink=0.8)
    figure.suptitle(
        f"{arch}: best match of each head of anchor seed {anchor} (first seed) in every other refit,\n"
        f"{scope.replace('_', '-')} (prompts: {promptset})",
        fontsize=10,
    )
    save_figure(figure, path)
    return data


def plot_cross_layer_stability(
    head_table: pd.DataFrame,
    layer_table: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
) -> pd.DataFrame:
    """Cross-layer head stability (Fig. 20): heads x layers heatmap and layer means beside same-layer.

    head_table, layer_table: HEAD_COLUMNS and LAYER_COLUMNS with both scopes; anchor = first seed.
    Returns the drawn [head, layer] matrix of cross-layer head stability.
    """
    heads = select_rows(head_table, "head_stability table", promptset=promptset, scope="cross_layer")
    anchor = _first(heads, "anchor_seed")
    matrix = _heads_by_layers(heads[heads["anchor_seed"] == anchor], "stability")
    layers = select_rows(layer_table, "layer_stability table", promptset=promptset, anchor_seed=anchor)

    width, height = _heatmap_size(*matrix.shape[::-1])
    figure = new_figure((width + 4.2, max(height, 3.4)))
    heat_ax, line_ax = figure.subplots(1, 2, width_ratios=[width, 4.2])
    _heads_layers_heatmap(heat_ax, matrix, f"cross-layer head stability ({SIMILARITY_LABEL})")
    heat_ax.set_title("heads (best match searched in all layers)", fontsize=9)
    bars = False
    for scope, colour in (("same_layer", "tab:blue"), ("cross_layer", "tab:orange")):
        scoped = layers[layers["scope"] == scope].sort_values("layer")
        if scoped.empty:
            continue
        x = np.asarray(_one_based(scoped["layer"]))
        line_ax.fill_between(
            x, scoped["mean"] - scoped["std"], scoped["mean"] + scoped["std"], color=colour, alpha=0.2, linewidth=0
        )
        line_ax.plot(x, scoped["mean"], marker="o", color=colour, label=scope.replace("_", "-"))
        draw_null(line_ax, x, scoped, f"{scope.replace('_', '-')} null (prompt permutation)", colour=colour)
        bars = draw_interval(line_ax, x, scoped, colour, None) or bars
        line_ax.set_xticks(x)
    line_ax.set_xlabel("layer")
    line_ax.set_ylabel(f"layer stability ({SIMILARITY_LABEL})")
    line_ax.set_title("layer mean ±1 s.d. over heads" + (", bars: bootstrap CI" if bars else ""), fontsize=9)
    line_ax.legend(fontsize=8)
    figure.suptitle(
        f"{arch}: cross-layer stability (prompts: {promptset}); anchor = first seed ({anchor})",
        fontsize=10,
    )
    save_figure(figure, path)
    return matrix


def plot_alignment_map(
    alignment_map: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    dispersion_table: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Cross-layer alignment map: share of best matches in each layer (Fig. 3), first seed as anchor.

    alignment_map: ALIGNMENT_COLUMNS; dispersion_table (optional): DISPERSION_COLUMNS, whose
    diagonal_share and normalized_entropy (and their null's, where finite) are drawn as a panel beside each row.
    Returns the drawn [layer, match_layer] matrix (0-based).
    """
    rows = select_rows(alignment_map, "alignment_map table", promptset=promptset)
    anchor = _first(rows, "anchor_seed")
    matrix = (
        rows[rows["anchor_seed"] == anchor]
        .pivot(index="layer", columns="match_layer", values="fraction")
        .sort_index()
        .sort_index(axis=1)
    )
    annotate = len(matrix) <= 12
    size = min(3.0 + 0.55 * len(matrix), 14.0)
    if dispersion_table is not None:
        measures = select_rows(dispersion_table, "alignment_dispersion table", promptset=promptset, anchor_seed=anchor)
        shown = [column for column in SIDE_PANEL if column in measures and measures[column].notna().any()]
        measures = measures.set_index("layer")[shown].reindex(matrix.index)
    figure = new_figure((size + (0.65 * len(shown) + 0.6 if dispersion_table is not None else 0.0), size + 0.6))
    if dispersion_table is None:
        map_ax = figure.add_subplot()
    else:
        # The side panel gets about 0.65 inches a column whatever the number of layers.
        map_ax, side_ax = figure.subplots(1, 2, sharey=True, width_ratios=[size, 0.65 * len(shown)])
    mesh = _heatmap(
        map_ax,
        matrix,
        "magma",
        _one_based(matrix.columns),
        _one_based(matrix.index),
        vmin=0.0,
        vmax=1.0,
        annotate=annotate,
    )
    figure.colorbar(mesh, ax=map_ax, label="fraction of best matches", location="bottom", shrink=0.6)
    map_ax.set_xlabel("layer of best match in pair refit")
    map_ax.set_ylabel("anchor layer")
    if dispersion_table is not None:
        side = _heatmap(
            side_ax,
            measures,
            "crest",
            [SIDE_PANEL[column] for column in shown],
            _one_based(measures.index),
            vmin=0.0,
            vmax=1.0,
            annotate=annotate,
        )
        side_ax.tick_params(axis="x", labelsize=7, labelbottom=False, labeltop=True, bottom=False, top=False)
        side_ax.tick_params(axis="y", labelleft=False, left=False)
        figure.colorbar(side, ax=side_ax, label="share / entropy", location="bottom", shrink=0.9)
    figure.suptitle(
        f"{arch}: cross-layer alignment map (prompts: {promptset})\n"
        f"anchor = first seed ({anchor}), pooled over heads and pair refits",
        fontsize=10,
    )
    save_figure(figure, path)
    return matrix
