"""Figures of the workflow: seaborn/matplotlib, rendered to files with the Agg backend.

One module per part of the paper, named as its library module: `stability` (§4.1-4.3, from
`headstab.stability`) and `weight_norms`, `prompt_length`, `optimizers`, `stability_gap`,
`residual_cka`, `ablation`, `meta_sne` (§4.4-4.9, from `headstab.sections`). Each function takes
tables, the output path and the architecture name(s), draws on a matplotlib `Figure` with its own Agg
canvas (no pyplot state), saves a PNG and returns the data it drew. Every title names the paper
figure the plot reproduces. This module holds what they share.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 150


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A constrained-layout figure on its own Agg canvas, whatever backend pyplot may be using.

    The canvas is attached at once, so text measurement for the layout reuses one cached renderer
    instead of building a new one per measurement.
    """
    figure = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)


STABILITY_LABEL = "layer stability (cosine similarity)"
OPTIMIZER_COLOURS = {"Adam": "tab:blue", "AdamW": "tab:orange"}
# Marker of a head or architecture by attention_only: circle with MLP, triangle attention-only.
ARCHITECTURE_MARKERS = {False: "o", True: "^"}


def layer_ticks(ax: Axes, n_layers: int) -> None:
    """x ticks at layers 1..n_layers (tables are 0-based, figures count from 1 as the paper does)."""
    ax.set_xticks(np.arange(1, n_layers + 1))
    ax.set_xlabel("layer")


def layer_palette(n_layers: int) -> list:
    """One colour per layer, shallow to deep."""
    return sns.color_palette("viridis", n_layers)
