"""Training curves (beyond the paper's figures): loss against tokens per architecture and per Adam/AdamW pair."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from headstab.plots import OPTIMIZER_COLOURS, new_figure, save_figure

__all__ = ["plot_optimizer_training_curves", "plot_training_curves"]

LOG_TOKENS_RATIO = 100  # log-scaled token axis when the logged tokens span more than this factor


def _draw_curves(ax: Axes, curves: pd.DataFrame, colour: str, label: str) -> pd.DataFrame:
    """Each refit's loss against tokens (thin) and their mean over refits (thick); returns the mean curve."""
    for _, curve in curves.groupby("seed"):
        ax.plot(curve["tokens"], curve["loss"], color=colour, linewidth=0.6, alpha=0.45)
    mean = curves.groupby("tokens", as_index=False)["loss"].mean()
    n_refits = curves["seed"].nunique()
    ax.plot(mean["tokens"], mean["loss"], color=colour, linewidth=2, label=f"{label}: mean of {n_refits} refits")
    tokens = curves["tokens"]
    if tokens.max() > LOG_TOKENS_RATIO * tokens[tokens > 0].min():
        ax.set_xscale("log")
    ax.set_xlabel("tokens trained")
    ax.set_ylabel("training loss (next-token cross entropy)")
    return mean


def plot_training_curves(curves: pd.DataFrame, finals: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """Loss against tokens of every refit of `arch` (thin lines) and their mean (thick).

    curves: CURVE_COLUMNS, finals: FINAL_COLUMNS (headstab.sections.training_curves). Returns the mean curve
    (tokens, loss).
    """
    if curves.empty:
        raise ValueError(f"no training curves of {arch}")
    figure = new_figure((6.4, 3.8))
    ax = figure.add_subplot()
    mean = _draw_curves(ax, curves, "tab:blue", arch)
    ax.legend(fontsize=7, loc="upper right")
    spread = finals["final_loss"]
    ax.set_title(
        f"{arch}: training loss\nfinal {spread.mean():.3f} (range {spread.min():.3f}-{spread.max():.3f}); "
        f"levelled off: {int(finals['converged'].sum())} of {len(finals)} refits",
        fontsize=9,
    )
    save_figure(figure, path)
    return mean


def plot_optimizer_training_curves(
    curves: Mapping[str, pd.DataFrame], finals: pd.DataFrame, path: str | Path, arch_adam: str, arch_adamw: str
) -> pd.DataFrame:
    """Adam and AdamW refits' loss against tokens on one axis, and each refit's final loss beside it.

    curves: {"Adam": CURVE_COLUMNS, "AdamW": CURVE_COLUMNS}; finals: FINAL_COLUMNS + optimizer. Returns per
    optimizer: mean, s.d. (ddof 1 where 2+ refits) and range of the final loss.
    """
    figure = new_figure((9, 3.8))
    curve_ax, final_ax = figure.subplots(1, 2, width_ratios=(2.2, 1))
    for optimizer, arch in (("Adam", arch_adam), ("AdamW", arch_adamw)):
        _draw_curves(curve_ax, curves[optimizer], OPTIMIZER_COLOURS[optimizer], f"{arch} ({optimizer})")
    curve_ax.legend(fontsize=7, loc="upper right")
    curve_ax.set_title("loss against tokens", fontsize=9)
    spread = finals.groupby("optimizer")["final_loss"].agg(["mean", "std", "min", "max", "count"]).reset_index()
    for x, row in enumerate(spread.itertuples()):
        values = finals.loc[finals["optimizer"] == row.optimizer, "final_loss"].to_numpy()
        jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(1)
        colour = OPTIMIZER_COLOURS[row.optimizer]
        final_ax.scatter(x + jitter, values, color=colour, s=14, alpha=0.7)
        final_ax.errorbar(x + 0.3, row.mean, yerr=0 if np.isnan(row.std) else row.std, fmt="o", color=colour, capsize=3)
    final_ax.set_xticks(range(len(spread)), list(spread["optimizer"]))
    final_ax.set_xlim(-0.5, len(spread) - 0.3)
    final_ax.set_ylabel("final training loss")
    final_ax.set_title("final loss: refits, mean ± s.d.", fontsize=9)
    means = dict(zip(spread["optimizer"], spread["mean"]))
    difference = means.get("AdamW", np.nan) - means.get("Adam", np.nan)
    figure.suptitle(
        f"Adam vs AdamW training: {arch_adam} and {arch_adamw}; final loss AdamW - Adam = {difference:+.3f}",
        fontsize=10,
    )
    save_figure(figure, path)
    return spread
