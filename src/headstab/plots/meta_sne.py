"""meta-SNE of all heads of all refits and architectures (paper §4.9, Fig. 11)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from headstab.plots import ARCHITECTURE_MARKERS, new_figure, save_figure

__all__ = ["plot_meta_sne"]


def plot_meta_sne(table: pd.DataFrame, path: str | Path, mantel: pd.DataFrame | None = None) -> pd.DataFrame:
    """meta-SNE of all heads of all refits and architectures (§4.9, Fig. 11).

    table: `meta_sne_table` output (tsne_x, tsne_y, relative_depth, optimizer, attention_only, embedding).
    Panels Adam | AdamW, on shared axes for a joint embedding and on their own axes when each optimizer
    was embedded alone; colour: relative depth (layer + 1) / L; marker: MLP (circle) or attention-only
    (triangle). The title names the descriptions (column description: raw or scale-normalised) and, given
    mantel (`depth_mantel_table` rows), the Mantel r and p of those descriptions against |Δ relative depth|.
    Returns the number of heads per panel.
    """
    needed = ("tsne_x", "tsne_y", "relative_depth", "optimizer")
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise ValueError(f"meta-SNE table lacks columns {missing}")
    joint = "embedding" not in table.columns or (table["embedding"] == "joint").all()
    figure = new_figure((10.5, 4.6))
    axes = figure.subplots(1, 2, sharex=joint, sharey=joint)
    counts = []
    mappable = None
    attention_only = (
        table["attention_only"] if "attention_only" in table.columns else pd.Series(False, index=table.index)
    )
    for ax, optimizer in zip(axes, ("Adam", "AdamW")):
        panel = table[table["optimizer"] == optimizer]
        for attn, marker in ARCHITECTURE_MARKERS.items():
            rows = panel[attention_only.loc[panel.index] == attn]
            if rows.empty:
                continue
            mappable = ax.scatter(
                rows["tsne_x"],
                rows["tsne_y"],
                c=rows["relative_depth"],
                cmap="viridis",
                vmin=0,
                vmax=1,
                marker=marker,
                s=14,
                alpha=0.85,
                linewidth=0.2,
                edgecolor="black",
                label="attention-only" if attn else "with MLP",
            )
        n_archs = panel["architecture"].nunique() if "architecture" in panel.columns else "?"
        ax.set_title(f"{optimizer}: {len(panel)} heads, {n_archs} architectures", fontsize=9)
        ax.set_xlabel("t-SNE 1 (arbitrary units)")
        if not panel.empty:
            # grey handles: the scatter's own handle would show an arbitrary depth colour
            handles = [
                Line2D(
                    [],
                    [],
                    marker=ARCHITECTURE_MARKERS[attn],
                    linestyle="",
                    color="grey",
                    markeredgecolor="black",
                    markeredgewidth=0.3,
                    label="attention-only" if attn else "with MLP",
                )
                for attn in (False, True)
                if (attention_only.loc[panel.index] == attn).any()
            ]
            ax.legend(handles=handles, fontsize=7, loc="best")
        counts.append((optimizer, len(panel)))
    axes[0].set_ylabel("t-SNE 2 (arbitrary units)")
    if mappable is not None:
        figure.colorbar(mappable, ax=axes, label="relative depth (layer + 1) / L", shrink=0.9)
    kind = "one joint t-SNE" if joint else "one t-SNE per optimizer (axes not comparable)"
    figure.suptitle(
        f"meta-SNE of attention heads (§4.9, Fig. 11; {kind}){_description_line(table, mantel)}", fontsize=10
    )
    save_figure(figure, path)
    return pd.DataFrame(counts, columns=["optimizer", "n_heads"])


def _description_line(table: pd.DataFrame, mantel: pd.DataFrame | None) -> str:
    """A second title line for scale-normalised descriptions or a Mantel test; empty for the paper's figure alone."""
    description = str(table["description"].iloc[0]) if "description" in table.columns and len(table) else "raw"
    parts = ["descriptions divided by their norms"] if description == "scale_normalised" else []
    rows = None if mantel is None else mantel[mantel["description"] == description]
    if rows is not None and len(rows):
        row = rows.iloc[0]
        if np.isfinite(row["p_value"]):
            parts.append(
                f"Mantel r = {row['mantel_r']:.2f} with |Δ relative depth|, p = {row['p_value']:.3g} "
                f"({int(row['n_refits'])} refits, {int(row['n_permutations'])} layer orders; "
                f"{row['calibration']})"
            )
        else:
            parts.append(f"no Mantel test of depth: {row['note']}")
    return ("\n" + "; ".join(parts)) if parts else ""
