"""The report's summary figure: layer stability against relative depth for every architecture."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from headstab.plots import STABILITY_LABEL, layer_palette, new_figure, save_figure

__all__ = ["plot_stability_by_depth"]


def plot_stability_by_depth(headline: pd.DataFrame, facts: Mapping[str, Mapping], path: str | Path) -> pd.DataFrame:
    """Pooled layer stability against relative depth (layer + 1) / L, one line per architecture with its
    interval as a band, coloured by depth, dashed for AdamW, triangles for attention-only; chance (the
    null) as grey crosses.

    headline: HEADLINE_COLUMNS (headstab.sections.headline); facts: {arch: architecture_facts}. Returns the
    drawn rows: architecture, relative_depth, estimate, ci_low, ci_high, null.
    """
    rows = headline[headline["statistic"] == "layer stability"].copy()
    if rows.empty:
        raise ValueError("no layer stability rows to draw")
    rows["relative_depth"] = (rows["layer"] + 1) / rows["architecture"].map(lambda a: facts[a]["n_layers"])
    depths = sorted({facts[a]["n_layers"] for a in rows["architecture"]})
    colours = dict(zip(depths, layer_palette(len(depths))))
    figure = new_figure((7.5, 4.2))
    ax = figure.add_subplot()
    for arch, group in rows.groupby("architecture", sort=False):
        group = group.sort_values("relative_depth")
        fact = facts[arch]
        colour = colours[fact["n_layers"]]
        ax.fill_between(
            group["relative_depth"], group["ci_low"], group["ci_high"], color=colour, alpha=0.12, linewidth=0
        )
        ax.plot(
            group["relative_depth"],
            group["estimate"],
            color=colour,
            marker="^" if fact["attention_only"] else "o",
            markersize=4,
            linestyle="--" if fact["optimizer"] == "AdamW" else "-",
            linewidth=1.2,
            label=arch,
        )
        ax.scatter(group["relative_depth"], group["null"], color="0.55", marker="x", s=12, linewidths=0.8)
    ax.scatter([], [], color="0.55", marker="x", label="null (chance)")
    ax.set_xlabel("relative depth (layer + 1) / L")
    ax.set_ylabel(STABILITY_LABEL)
    ax.set_xlim(0, 1.05)
    ax.legend(
        fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=1 + len(rows["architecture"].unique()) // 14
    )
    ax.set_title(
        "Layer stability against relative depth, all architectures (§4.1, §4.6)\n"
        "band: bootstrap interval; dashed: AdamW; triangles: attention-only; x: null",
        fontsize=9,
    )
    save_figure(figure, path)
    return rows[["architecture", "relative_depth", "estimate", "ci_low", "ci_high", "null"]]
