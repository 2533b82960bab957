"""Initialisation seed vs data-order seed: pair stability by kind of pair, per layer (docs/beyond_the_paper.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import layer_ticks, new_figure, save_figure

__all__ = ["plot_seed_grid"]

KIND_LABELS = {
    "shares_init": "same init, other data order",
    "shares_data": "same data order, other init",
    "shares_neither": "both differ",
    "shares_both": "same seeds, weights one ulp apart",
}
FRACTION_LABELS = {
    "init_fraction": "initialisation",
    "data_fraction": "data order",
    "interaction_fraction": "interaction (the refit's own)",
    "floor_fraction": "of which one ulp already gives (floor)",
}


def plot_seed_grid(table: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """Left: per layer, mean pair stability of each kind of pair with intervals; right: the share of head
    instability due to initialisation, data order and their interaction, and, when the grid has one-ulp twins,
    the floor: the share a one-ulp change of the initial weights already gives. table: `seed_grid_table`."""
    n_layers = int(table["layer"].max()) + 1
    figure = new_figure((9.5, 3.8))
    lines_ax, share_ax = figure.subplots(1, 2)
    for kind, label in KIND_LABELS.items():
        rows = table[table["statistic"] == kind].sort_values("layer")
        if rows.empty:  # no one-ulp twins in this grid
            continue
        x = rows["layer"].to_numpy() + 1
        lines_ax.plot(x, rows["estimate"], marker="o", label=label)
        lines_ax.fill_between(x, rows["ci_low"], rows["ci_high"], alpha=0.2)
    layer_ticks(lines_ax, n_layers)
    lines_ax.set_ylabel("pair stability (mean best-match cosine)")
    lines_ax.legend(fontsize=7)
    fractions = {name: label for name, label in FRACTION_LABELS.items() if (table["statistic"] == name).any()}
    width = 0.8 / len(fractions)
    for i, (fraction, label) in enumerate(fractions.items()):
        rows = table[table["statistic"] == fraction].sort_values("layer")
        x = rows["layer"].to_numpy() + 1 + (i - (len(fractions) - 1) / 2) * width
        errors = np.abs(rows[["ci_low", "ci_high"]].to_numpy().T - rows["estimate"].to_numpy())
        share_ax.bar(x, rows["estimate"], width=width, yerr=errors, capsize=2, label=label)
    layer_ticks(share_ax, n_layers)
    share_ax.axhline(0, color="black", linewidth=0.6)
    share_ax.set_ylabel("share of head instability (1 - stability)")
    share_ax.legend(fontsize=7)
    figure.suptitle(f"{arch}: initialisation seed vs data-order seed", fontsize=9)
    save_figure(figure, path)
    return table
