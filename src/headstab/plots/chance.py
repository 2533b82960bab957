"""Stability against chance (docs/statistics.md): layer stability with its interval against the
prompt-permutation null and the untrained step-0 refits, across architectures; and the width of the
interval against the number of refits used (how many seeds a study needs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import STABILITY_LABEL, layer_ticks, new_figure, save_figure

__all__ = ["plot_seeds_needed", "plot_stability_against_chance"]


def _band(ax, x, table: pd.DataFrame, prefix: str, colour: str, label: str, style: str = "-") -> None:
    low, high = table[f"{prefix}ci_low"].to_numpy(float), table[f"{prefix}ci_high"].to_numpy(float)
    centre = table["stability" if prefix == "" else prefix.rstrip("_")].to_numpy(float)
    if not np.all(np.isfinite(centre)):
        return
    ax.fill_between(x, low, high, color=colour, alpha=0.25, linewidth=0)
    ax.plot(x, centre, style, color=colour, marker="o", markersize=3, label=label)


def plot_stability_against_chance(
    summary: pd.DataFrame, path: str | Path, promptset: str, confidence: float = 0.95
) -> pd.DataFrame:
    """One panel per architecture: same-layer layer stability (pooled over refits) with its `confidence`
    interval, the prompt-permutation null and the step-0 baseline with theirs; each panel's title gives the
    refits and, where the table has it, how the study labels its interval there (ci_calibration).

    summary: rows of layer_stability_pooled.csv with an architecture column (scope same_layer used).
    Returns the drawn rows.
    """
    rows = summary[(summary["scope"] == "same_layer") & (summary["promptset"] == promptset)]
    if rows.empty:
        raise ValueError(f"no same_layer rows for prompt set {promptset!r} in the summary table")
    architectures = list(dict.fromkeys(rows["architecture"]))
    n_cols = min(4, len(architectures))
    n_rows = int(np.ceil(len(architectures) / n_cols))
    figure = new_figure((3.2 * n_cols, 2.6 * n_rows + 0.6))
    axes = np.atleast_1d(figure.subplots(n_rows, n_cols, sharey=True, squeeze=False)).ravel()
    for ax, arch in zip(axes, architectures):
        table = rows[rows["architecture"] == arch].sort_values("layer")
        x = table["layer"].to_numpy() + 1
        _band(ax, x, table, "", "tab:blue", f"trained ({confidence:.0%} CI)")
        _band(ax, x, table, "null_", "grey", "prompt-permutation null", "--")
        _band(ax, x, table, "init_", "tab:red", "step 0, untrained", ":")
        label = f", interval {table['ci_calibration'].iloc[0]}" if "ci_calibration" in table.columns else ""
        ax.set_title(f"{arch} ({int(table['n_refits'].iloc[0])} refits{label})", fontsize=9)
        layer_ticks(ax, len(x))
    for ax in axes[len(architectures) :]:
        ax.set_visible(False)
    axes[0].set_ylabel(STABILITY_LABEL)
    axes[0].legend(fontsize=7, loc="lower left")
    figure.suptitle(
        f"Stability against chance (prompts: {promptset}): multi-bootstrap {confidence:.0%} intervals over refits and "
        "prompts"
    )
    save_figure(figure, path)
    return rows


def plot_seeds_needed(
    curve: pd.DataFrame, needed: pd.DataFrame, path: str | Path, arch: str, confidence: float = 0.95
) -> pd.DataFrame:
    """Width of the `confidence` interval of layer stability (one line per layer) and of ΔS against the number
    of refits, log-log with a 1/sqrt(n) guide and the tolerance. Returns the drawn curve."""
    figure = new_figure((6.4, 4.2))
    ax = figure.subplots()
    for (statistic, layer), part in curve.groupby(["statistic", "layer"], sort=False):
        part = part.sort_values("n_refits")
        label = f"layer {layer + 1}" if statistic == "layer_stability" else "ΔS (§4.6)"
        style = "-" if statistic == "layer_stability" else "k--"
        ax.errorbar(
            part["n_refits"],
            part["ci_width"],
            yerr=part["ci_width_sd"],
            fmt=style,
            marker="o",
            markersize=3,
            label=label,
            capsize=2,
        )
    largest = curve.loc[curve["n_refits"].idxmax()]
    n = np.geomspace(2, curve["n_refits"].max(), 20)
    ax.plot(n, largest["ci_width"] * np.sqrt(largest["n_refits"] / n), color="grey", linewidth=0.8, label="∝ 1/√n")
    tolerance = float(needed["tolerance"].iloc[0])
    ax.axhline(tolerance, color="tab:red", linewidth=0.8, label=f"tolerance {tolerance:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("refits used")
    ax.set_ylabel(f"{confidence:.0%} interval width")
    ax.legend(fontsize=7)
    worst = needed.loc[needed["n_refits_needed"].idxmax()]
    ax.set_title(
        f"{arch}: refits needed for width ≤ {tolerance:g}: {int(worst['n_refits_needed'])}"
        f"{' (extrapolated)' if worst['extrapolated'] else ''}",
        fontsize=9,
    )
    save_figure(figure, path)
    return curve
