"""Adam vs AdamW (paper §4.5): layer stability (Fig. 6 / B.6), activation norms (Fig. 35), perplexity (§B.7 figures)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from headstab.plots import OPTIMIZER_COLOURS, STABILITY_LABEL, layer_ticks, new_figure, save_figure
from headstab.statistics.calibration import DESCRIPTIVE, calibration_label
from headstab.table_rows import select_rows

__all__ = ["plot_activation_norms", "plot_optimizer_stability", "plot_perplexity"]


def _across_anchors(layer_stability: pd.DataFrame) -> pd.DataFrame:
    """Per layer: mean over anchors of the layer mean, its s.d. across anchors, mean head s.d."""
    return (
        layer_stability.groupby("layer")
        .agg(mean=("mean", "mean"), anchors_std=("mean", lambda x: x.std(ddof=0)), heads_std=("std", "mean"))
        .reset_index()
    )


def plot_optimizer_stability(
    adam: pd.DataFrame,
    adamw: pd.DataFrame,
    path: str | Path,
    arch_adam: str,
    arch_adamw: str,
    promptset: str,
    scope: str = "same_layer",
) -> pd.DataFrame:
    """Layer-wise stability of the two members of an optimizer pair (Adam, AdamW), side by side (§4.5, Fig. 6 / B.6).

    adam, adamw: layer stability tables (anchor_seed, layer, mean, std, + promptset, scope).
    Returns per optimizer and layer: mean (over anchors), anchors_std, heads_std.
    """
    figure = new_figure((10, 3.9))
    axes = figure.subplots(1, 2, sharey=True)
    drawn = []
    for ax, table, arch, optimizer in zip(axes, (adam, adamw), (arch_adam, arch_adamw), ("Adam", "AdamW")):
        stab = select_rows(table, f"layer stability of {arch}", promptset=promptset, scope=scope)
        summary = _across_anchors(stab)
        x = summary["layer"].to_numpy() + 1
        colour = OPTIMIZER_COLOURS[optimizer]
        for i, (_, rows) in enumerate(stab.groupby("anchor_seed")):
            rows = rows.sort_values("layer")
            ax.plot(
                rows["layer"] + 1,
                rows["mean"],
                color="tab:grey",
                linewidth=0.7,
                alpha=0.6,
                label="one anchor" if i == 0 else None,
            )
        ax.fill_between(
            x,
            summary["mean"] - summary["heads_std"],
            summary["mean"] + summary["heads_std"],
            color=colour,
            alpha=0.2,
            linewidth=0,
            label="±1 s.d. over heads",
        )
        ax.plot(x, summary["mean"], marker="o", color=colour, label="mean over anchors")
        layer_ticks(ax, len(summary))
        ax.set_title(f"{arch} ({optimizer})", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        drawn.append(summary.assign(optimizer=optimizer, architecture=arch))
    axes[0].set_ylabel(STABILITY_LABEL)
    figure.suptitle(f"Adam vs AdamW: layer stability (§4.5, Fig. 6 / B.6; prompts: {promptset})", fontsize=10)
    save_figure(figure, path)
    return pd.concat(drawn, ignore_index=True)


def plot_activation_norms(norms: pd.DataFrame, path: str | Path, arch_adam: str, arch_adamw: str) -> pd.DataFrame:
    """Mean per-token L2 norm of attention output and resid_mid, Adam vs AdamW (§4.5, Fig. 35).

    norms: optimizer ('Adam' | 'AdamW'), seed, layer, activation ('attn_out' | 'resid_mid'),
    mean_norm. Returns per optimizer, activation and layer: mean and std over refits.
    """
    data = (
        norms.groupby(["optimizer", "activation", "layer"])["mean_norm"]
        .agg(mean="mean", std=lambda x: x.std(ddof=0), n_refits="count")
        .reset_index()
    )
    titles = {"attn_out": "attention output (hook_attn_out)", "resid_mid": "residual stream (hook_resid_mid)"}
    arch_of = {"Adam": arch_adam, "AdamW": arch_adamw}
    figure = new_figure((10, 3.9))
    axes = figure.subplots(1, 2)
    for ax, activation in zip(axes, ("attn_out", "resid_mid")):
        for optimizer, colour in OPTIMIZER_COLOURS.items():
            rows = data[(data["activation"] == activation) & (data["optimizer"] == optimizer)]
            if rows.empty:
                continue
            x = rows["layer"].to_numpy() + 1
            ax.fill_between(
                x, rows["mean"] - rows["std"], rows["mean"] + rows["std"], color=colour, alpha=0.2, linewidth=0
            )
            n_refits = int(rows["n_refits"].iloc[0])
            ax.plot(
                x,
                rows["mean"],
                marker="o",
                color=colour,
                label=f"{arch_of[optimizer]} ({optimizer}), mean ±1 s.d. over {n_refits} refits",
            )
        layer_ticks(ax, int(data["layer"].max()) + 1)
        ax.set_ylabel("mean per-token L2 norm (activation units)")
        ax.set_title(titles[activation], fontsize=9)
        ax.legend(fontsize=7, loc="best")
    figure.suptitle("Adam vs AdamW: activation norms, padding excluded (§4.5, Fig. 35)", fontsize=10)
    save_figure(figure, path)
    return data


def plot_perplexity(
    ppl: pd.DataFrame,
    comparison: Mapping[str, float],
    path: str | Path,
    arch_adam: str,
    arch_adamw: str,
    corpus: str = "held-out text",
) -> pd.DataFrame:
    """Validation perplexity of every refit, Adam vs AdamW (§4.5, §B.7 figures), with the two difference tests
    in the title (each marked descriptive where it is not calibrated at the refits it has); parity is the TOST's.

    ppl: optimizer, seed, perplexity; comparison: `perplexity_comparison` result.
    Returns per optimizer: mean, std (ddof 1), n.
    """
    data = ppl.groupby("optimizer")["perplexity"].agg(mean="mean", std="std", n="count").reset_index()
    figure = new_figure((5.2, 4.2))
    ax = figure.add_subplot()
    arch_of = {"Adam": arch_adam, "AdamW": arch_adamw}
    order = [o for o in ("Adam", "AdamW") if o in set(ppl["optimizer"])]
    for i, optimizer in enumerate(order):
        values = ppl.loc[ppl["optimizer"] == optimizer, "perplexity"].to_numpy()
        jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(1)
        ax.scatter(
            i + jitter,
            values,
            color=OPTIMIZER_COLOURS[optimizer],
            alpha=0.7,
            s=24,
            edgecolor="black",
            linewidth=0.3,
            label="one refit" if i == 0 else None,
        )
        row = data[data["optimizer"] == optimizer].iloc[0]
        ax.errorbar(
            i + 0.3,
            row["mean"],
            yerr=row["std"],
            fmt="D",
            color="black",
            capsize=4,
            label="mean ±1 s.d." if i == 0 else None,
        )
    ax.set_xticks(range(len(order)), [f"{arch_of[o]}\n({o})" for o in order])
    ax.set_xlim(-0.5, len(order) - 0.3)
    ax.set_ylabel(f"validation perplexity on {corpus}")
    ax.set_xlabel("architecture (optimizer)")
    ax.legend(fontsize=7, loc="best")
    n = min(int(comparison["n_adam"]), int(comparison["n_adamw"]))

    def p_text(key: str, method: str) -> str:
        flag = f" (descriptive at {n} refits)" if calibration_label(method, n) == DESCRIPTIVE else ""
        return f"p = {comparison[key]:.3g}{flag}"

    ax.set_title(
        "Adam vs AdamW: validation perplexity (§4.5, §B.7 figures)\n"
        f"Welch t = {comparison['welch_t']:.2f}, {p_text('welch_p', 'welch_t_perplexity')}\n"
        f"Brunner-Munzel {p_text('brunner_munzel_p', 'brunner_munzel_perplexity')}\n"
        "difference tests; parity is the TOST of optimizer_tests.csv",
        fontsize=8,
    )
    save_figure(figure, path)
    return data
