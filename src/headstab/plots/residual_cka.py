"""Residual-stream CKA between refits against head stability (paper §4.7, Fig. 9 / B.8)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.cka import layer_cka_summary
from headstab.plots import STABILITY_LABEL, layer_palette, layer_ticks, new_figure, save_figure
from headstab.table_rows import pearson_or_nan, select_rows

__all__ = ["plot_residual_stream"]


def _all_positions(table: pd.DataFrame) -> pd.DataFrame:
    """The rows over all real tokens (a table without the positions column has no others)."""
    return table[table["positions"] == "all"] if "positions" in table.columns else table


def _with_intervals(data: pd.DataFrame, layer_intervals: pd.DataFrame, promptset: str) -> pd.DataFrame:
    rows = _all_positions(select_rows(layer_intervals, "residual CKA layers table", promptset=promptset))
    return data.merge(rows[["layer", "ci_low", "ci_high"]], on="layer", how="left")


def _controls(ax, x: np.ndarray, layer_intervals: pd.DataFrame | None, promptset: str) -> None:
    """The step-0 CKA (chance level, with its interval) and the CKA without the BOS rows, when the table has them."""
    if layer_intervals is None:
        return
    rows = select_rows(layer_intervals, "residual CKA layers table", promptset=promptset)
    full = _all_positions(rows).sort_values("layer")
    if "init_cka_mean" in full.columns and full["init_cka_mean"].notna().all():
        ax.fill_between(x, full["init_ci_low"], full["init_ci_high"], color="grey", alpha=0.2, linewidth=0)
        ax.plot(
            x,
            full["init_cka_mean"],
            marker="s",
            linestyle=":",
            color="grey",
            label="CKA at step 0 (untrained refits: chance), 95% interval",
        )
    if "positions" in rows.columns and (rows["positions"] == "no_bos").any():
        no_bos = rows[rows["positions"] == "no_bos"].sort_values("layer")
        ax.plot(
            x,
            no_bos["cka_mean"],
            marker="^",
            linestyle="--",
            color="tab:purple",
            alpha=0.7,
            label="CKA without the BOS rows",
        )


def _interval_bars(ax, x: np.ndarray, data: pd.DataFrame) -> None:
    """The mean CKA's bootstrap interval as error bars, when the data has it."""
    if "ci_low" not in data:
        return
    low, high = data["cka_mean"] - data["ci_low"], data["ci_high"] - data["cka_mean"]
    ax.errorbar(
        x,
        data["cka_mean"],
        yerr=[low.clip(lower=0), high.clip(lower=0)],
        fmt="none",
        ecolor="tab:purple",
        capsize=3,
        label="CKA mean, 95% bootstrap interval (refits)",
    )


def _cka_vs_stability(scatter_ax, data: pd.DataFrame, ylabel: str) -> None:
    """Layer means of CKA against head stability, with their s.d. as error bars and Pearson r over layers."""
    n_layers = len(data)
    palette = layer_palette(n_layers)
    for i, row in data.iterrows():
        scatter_ax.errorbar(
            row["stability_mean"],
            row["cka_mean"],
            xerr=row["stability_std"],
            yerr=row["cka_std"],
            fmt="o",
            color=palette[i],
            ecolor=palette[i],
            elinewidth=0.8,
            capsize=2,
            label=f"layer {int(row['layer']) + 1}",
        )
    r, _ = pearson_or_nan(data["stability_mean"].to_numpy(), data["cka_mean"].to_numpy())
    if n_layers >= 3 and np.isfinite(r):
        scatter_ax.set_title(f"CKA vs head stability (Pearson r over layers = {r:.2f})", fontsize=9)
    else:  # undefined for 2 layers or a constant variable
        scatter_ax.set_title("CKA vs head stability", fontsize=9)
    scatter_ax.set_xlabel(STABILITY_LABEL)
    scatter_ax.set_ylabel(ylabel)
    scatter_ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1)


def plot_residual_stream(
    cka: pd.DataFrame,
    layer_stability: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str,
    scope: str = "same_layer",
    kernel: str = "RBF",
    hook: str = "hook_resid_mid",
    pairs: str = "distinct",
    layer_intervals: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Residual-stream CKA between refits against head stability, per layer (§4.7, Fig. 9 / B.8).

    cka: (promptset, positions,) seed_a, seed_b, layer, cka (the positions "all" rows are drawn); layer_stability:
    anchor_seed, layer, mean, std.
    hook: the residual hook the CKA was computed on (config key analysis.cka_hook), named in the labels.
    pairs: how CKA is averaged over refit pairs (`headstab.cka.layer_cka_summary`, config key analysis.cka_pairs).
    layer_intervals: residual_cka_layers.csv rows (promptset, positions, layer, cka_mean, ci_low, ci_high,
        init_cka_mean, init_ci_low, init_ci_high): the mean CKA's bootstrap interval, drawn as error bars, and the
        controls, the CKA at step 0 (chance) and without the BOS rows, drawn as lines.
    Returns per layer: cka_mean, cka_std, n_pairs (over pairs), stability_mean, stability_std (over anchors),
    and ci_low, ci_high when layer_intervals is given.
    """
    cka = _all_positions(select_rows(cka, "residual CKA table", promptset=promptset))
    stab = select_rows(layer_stability, "layer stability", promptset=promptset, scope=scope)
    data = layer_cka_summary(cka, pairs).merge(
        stab.groupby("layer")["mean"].agg(stability_mean="mean", stability_std=lambda x: x.std(ddof=0)).reset_index(),
        on="layer",
    )
    if layer_intervals is not None:
        data = _with_intervals(data, layer_intervals, promptset)
    n_layers = len(data)
    n_pairs = int(data["n_pairs"].iloc[0])
    pairing = "distinct refit pairs" if pairs == "distinct" else "ordered refit pairs incl. self-pairs"
    x = data["layer"].to_numpy() + 1

    figure = new_figure((10, 3.9))
    line_ax, scatter_ax = figure.subplots(1, 2)
    for column, colour, label in (
        ("cka", "tab:purple", f"residual-stream CKA ({hook}, {kernel}), {n_pairs} {pairing}"),
        ("stability", "tab:green", "head stability (layer mean), all anchors"),
    ):
        mean, std = data[f"{column}_mean"], data[f"{column}_std"]
        line_ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.2, linewidth=0)
        line_ax.plot(x, mean, marker="o", color=colour, label=label + " ±1 s.d.")
    _interval_bars(line_ax, x, data)
    _controls(line_ax, x, layer_intervals, promptset)
    layer_ticks(line_ax, n_layers)
    line_ax.set_ylabel("similarity (CKA or cosine, unitless)")
    line_ax.set_ylim(bottom=min(0.0, line_ax.get_ylim()[0]), top=1.05)
    line_ax.legend(fontsize=7, loc="lower left")
    line_ax.set_title("per layer", fontsize=9)

    _cka_vs_stability(scatter_ax, data, f"residual-stream CKA ({hook}, {kernel})")
    figure.suptitle(
        f"{arch}: residual stream similarity vs head stability (§4.7, Fig. 9 / B.8; prompts: {promptset})", fontsize=10
    )
    save_figure(figure, path)
    return data
