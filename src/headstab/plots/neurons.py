"""MLP neurons: the universal share per layer against its null, and beside head stability by relative depth
(docs/beyond_the_paper.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import new_figure, save_figure

__all__ = ["plot_head_neuron_depth", "plot_universal_share"]


def _interval(ax, x, estimate, low, high, **style) -> None:
    """Points with their interval as error bars (a NaN bound draws no bar)."""
    estimate = np.asarray(estimate, float)
    errors = np.vstack([estimate - np.asarray(low, float), np.asarray(high, float) - estimate])
    ax.errorbar(x, estimate, yerr=np.nan_to_num(errors, nan=0.0), capsize=3, marker="o", **style)


def plot_universal_share(shares: pd.DataFrame, path: str | Path, arch: str, threshold: float) -> None:
    """The universal share per layer with its refit-resampled interval, and the null's share (the chance level)
    with its interval. shares: SHARE_COLUMNS of `headstab.neurons.shares.universal_share_table`."""
    figure = new_figure((5.2, 3.6))
    ax = figure.subplots()
    layers = shares["layer"].to_numpy() + 1
    _interval(ax, layers, shares["universal_share"], shares["ci_low"], shares["ci_high"], label="observed")
    null = (shares["null_share"], shares["null_ci_low"], shares["null_ci_high"])
    _interval(ax, layers + 0.08, *null, color="0.5", linestyle="--", label="rotation null (chance)")
    ax.set_xticks(layers)
    ax.set_xlabel("layer")
    ax.set_ylabel(f"share of neurons universal (mean max corr. > {threshold:g})")
    n_refits = int(shares["n_refits"].iloc[0])
    ax.set_title(
        f"{arch}: universal neurons, {n_refits} refits ({shares['calibration'].iloc[0]} intervals)", fontsize=9
    )
    ax.legend(fontsize=7)
    save_figure(figure, path)


def plot_head_neuron_depth(layers: pd.DataFrame, path: str | Path) -> None:
    """Two panels against relative depth, one line per architecture: head stability above its null (same
    layer, best match) and the universal-neuron share above its null's share, each with its interval.
    layers: LAYER_COLUMNS of `headstab.neurons.head_layers.head_neuron_layer_table`."""
    figure = new_figure((5.6, 5.4))
    top, bottom = figure.subplots(2, 1, sharex=True)
    for arch, rows in layers.groupby("architecture", sort=False):
        depth = rows["relative_depth"].to_numpy()
        _interval(top, depth, rows["above_null"], rows["above_null_ci_low"], rows["above_null_ci_high"], label=arch)
        _interval(bottom, depth, rows["universal_share"], rows["neuron_ci_low"], rows["neuron_ci_high"], label=arch)
        bottom.plot(depth, rows["null_share"], color="0.5", linestyle=":", linewidth=1)
    top.axhline(0.0, color="0.6", linewidth=0.6)
    top.set_ylabel("head stability above null")
    bottom.set_ylabel("universal-neuron share\n(dotted: null share)")
    bottom.set_xlabel("relative depth (layer / layers)")
    top.legend(fontsize=7)
    top.set_title("heads and MLP neurons by depth on the same refits", fontsize=9)
    save_figure(figure, path)
