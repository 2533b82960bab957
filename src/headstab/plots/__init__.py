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
from matplotlib.text import Text

DPI = 150


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A constrained-layout figure on its own Agg canvas, whatever backend pyplot may be using.

    The canvas is attached at once, so text measurement for the layout reuses one cached renderer
    instead of building a new one per measurement.
    """
    figure = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def text_outside_canvas(figure: Figure, tolerance: float = 1.0) -> list[str]:
    """The visible texts of `figure` (titles, labels, tick labels, legends) whose tight bounding box leaves
    the canvas by more than `tolerance` pixels, as "'text' by N px", drawn at the saved resolution."""
    figure.set_dpi(DPI)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    width, height = figure.bbox.width, figure.bbox.height
    # Tick labels beyond the view limits keep stale positions but are not drawn (Axis._update_ticks: drawn ones).
    undrawn = set()
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            drawn = {id(label) for tick in axis._update_ticks() for label in (tick.label1, tick.label2)}
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                undrawn.update(label for label in (tick.label1, tick.label2) if id(label) not in drawn)
    outside = []
    for text in figure.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or text in undrawn:
            continue
        box = text.get_window_extent(renderer)
        overflow = max(-box.x0, box.x1 - width, -box.y0, box.y1 - height)
        if overflow > tolerance:
            outside.append(f"{text.get_text()!r} by {overflow:.0f} px")
    return outside


def fit_canvas(figure: Figure, attempts: int = 3) -> None:
    """Grow `figure` until its text fits the canvas: a title wider than the panels (a 2-layer heatmap) or a
    legend beside the axes; constrained layout then places the panels in the larger canvas."""
    for _ in range(attempts):
        figure.set_dpi(DPI)
        figure.canvas.draw()
        box = figure.get_tightbbox(figure.canvas.get_renderer())  # inches
        width, height = figure.get_size_inches()
        # Twice the larger side's overflow: a centred title overflows both sides equally.
        grow_x = 2 * max(0.0, -box.x0, box.x1 - width)
        grow_y = 2 * max(0.0, -box.y0, box.y1 - height)
        if grow_x <= 1 / DPI and grow_y <= 1 / DPI:
            return
        figure.set_size_inches(width + grow_x + 0.1 * (grow_x > 0), height + grow_y + 0.1 * (grow_y > 0))


def save_figure(figure: Figure, path: str | Path) -> None:
    """Save `figure` as a PNG at DPI, grown first so that no text is cut at the canvas edge."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fit_canvas(figure)
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
