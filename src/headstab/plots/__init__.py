"""Figures of the workflow: seaborn/matplotlib, rendered to files with the Agg backend."""

from __future__ import annotations

from pathlib import Path

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
