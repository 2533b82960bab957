"""Figures of the §4.4-4.9 analyses (paper Fig. 5-11, B.4-B.9, Table B.5/B.7).

Same conventions as `headstab.plots.stability`: each function takes tables, the output path and the
architecture name(s), draws on a matplotlib `Figure` with its own Agg canvas (no pyplot state),
saves a PNG and returns the data it drew. Tables keep 0-based layers; axes show layers 1..L as the
paper does. Every title names the paper figure the plot reproduces.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from headstab.analyses import pearson_or_nan
from headstab.cka import layer_cka_summary
from headstab.plots import new_figure, save_figure
from matplotlib.lines import Line2D

__all__ = [
    "plot_ablation_correlation",
    "plot_activation_norms",
    "plot_extreme_layer_depth",
    "plot_meta_sne",
    "plot_optimizer_stability",
    "plot_perplexity",
    "plot_prompt_length",
    "plot_qnorm_vs_stability",
    "plot_residual_stream",
    "plot_stability_gap",
]

STABILITY_LABEL = "layer stability (cosine similarity)"
OPTIMIZER_COLOURS = {"Adam": "tab:blue", "AdamW": "tab:orange"}


def _filter(table: pd.DataFrame, name: str, **filters: object) -> pd.DataFrame:
    """Rows matching column=value for the columns present; a clear error if none remain."""
    for column, value in filters.items():
        if value is None or column not in table.columns:
            continue
        rows = table[table[column] == value]
        if rows.empty:
            raise ValueError(
                f"{name} has no rows with {column} = {value!r}; available: "
                f"{sorted(map(str, table[column].unique()))}"
            )
        table = rows
    if table.empty:
        raise ValueError(f"{name} is empty")
    return table


def _layer_ticks(ax, n_layers: int) -> None:
    ax.set_xticks(np.arange(1, n_layers + 1))
    ax.set_xlabel("layer")


def _layer_palette(n_layers: int) -> list:
    return sns.color_palette("viridis", n_layers)


def _across_anchors(layer_stability: pd.DataFrame) -> pd.DataFrame:
    """Per layer: mean over anchors of the layer mean, its s.d. across anchors, mean head s.d."""
    return (
        layer_stability.groupby("layer")
        .agg(mean=("mean", "mean"), anchors_std=("mean", lambda x: x.std(ddof=0)), heads_std=("std", "mean"))
        .reset_index()
    )


# --- §4.4.1 -----------------------------------------------------------------------------------


def plot_qnorm_vs_stability(
    norms: pd.DataFrame,
    layer_stability: pd.DataFrame,
    correlations: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str = "primary",
    scope: str = "same_layer",
    attention_norm: str = "per_head_mean",
) -> pd.DataFrame:
    """Query-weight norm against layer stability, and r for every weight matrix (§4.4.1, Table B.5).

    norms: seed, layer, matrix, frobenius_norm; layer_stability: anchor_seed, layer, mean (+
    promptset, scope); correlations: anchor_seed, matrix, pearson_r (`norm_stability_correlation`).
    attention_norm: how the attention norms were taken (`headstab.analyses.layer_weight_norms`), for the label.
    Returns the scatter data: seed, layer, frobenius_norm (W_Q), mean (stability).
    """
    norm_label = "mean over heads" if attention_norm == "per_head_mean" else "whole layer"
    stab = _filter(layer_stability, "layer stability", promptset=promptset, scope=scope)
    q = _filter(norms, "weight norms", matrix="W_Q")
    data = q.merge(stab[["anchor_seed", "layer", "mean"]], left_on=["seed", "layer"], right_on=["anchor_seed", "layer"])
    data = data[["seed", "layer", "frobenius_norm", "mean"]]
    n_layers = int(data["layer"].max()) + 1
    palette = _layer_palette(n_layers)

    figure = new_figure((10, 4.0))
    scatter_ax, bar_ax = figure.subplots(1, 2, width_ratios=[1, 1.2])
    for layer in range(n_layers):
        rows = data[data["layer"] == layer]
        scatter_ax.scatter(rows["frobenius_norm"], rows["mean"], color=palette[layer], s=28,
                           edgecolor="black", linewidth=0.3, label=f"layer {layer + 1}")
    scatter_ax.set_xlabel(f"Frobenius norm of W_Q, {norm_label} (weight units)")
    scatter_ax.set_ylabel(STABILITY_LABEL)
    scatter_ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1, title="one point per refit", title_fontsize=7)
    scatter_ax.set_title("W_Q norm vs stability", fontsize=9)

    order = [m for m in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")
             if m in set(correlations["matrix"])]
    summary = correlations.groupby("matrix")["pearson_r"].agg(["mean", "std"]).reindex(order)
    x = np.arange(len(order))
    bar_ax.bar(x, summary["mean"], yerr=summary["std"].fillna(0), color="tab:grey", alpha=0.6,
               capsize=3, label="mean ±1 s.d. over anchors")
    for i, matrix in enumerate(order):
        r = correlations.loc[correlations["matrix"] == matrix, "pearson_r"].to_numpy()
        bar_ax.scatter(np.full(len(r), i) + np.linspace(-0.15, 0.15, len(r)), r, s=10, color="black",
                       zorder=3, label="one anchor" if i == 0 else None)
    bar_ax.axhline(0, color="black", linewidth=0.6)
    bar_ax.set_xticks(x, order)
    bar_ax.set_ylim(-1.05, 1.05)
    bar_ax.set_xlabel("weight matrix")
    bar_ax.set_ylabel("Pearson r with layer stability (over layers)")
    bar_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    bar_ax.set_title("correlation per matrix", fontsize=9)
    figure.suptitle(f"{arch}: weight norms vs layer stability (§4.4.1, Table B.5; prompts: {promptset})", fontsize=10)
    save_figure(figure, path)
    return data.reset_index(drop=True)


# --- §4.4.2 -----------------------------------------------------------------------------------


def plot_prompt_length(table: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """Layer-wise stability, one line per prompt length (§4.4.2, Fig. 5 / B.4).

    table: prompt_length, layer, mean, std (+ anchor_seed) from `prompt_length_table`.
    Returns the drawn data: [layer] x [prompt_length] means.
    """
    if table.empty:
        raise ValueError("prompt-length table is empty")
    data = table.pivot(index="layer", columns="prompt_length", values="mean").sort_index()
    n_layers = len(data)
    palette = sns.color_palette("crest", data.shape[1])
    figure = new_figure((max(5.0, 2.5 + 0.45 * n_layers), 3.8))
    ax = figure.add_subplot()
    x = data.index.to_numpy() + 1
    for colour, length in zip(palette, data.columns):
        ax.plot(x, data[length], marker="o", markersize=4, color=colour, label=f"{length} words")
    _layer_ticks(ax, n_layers)
    ax.set_ylabel(STABILITY_LABEL)
    ax.legend(title="prompt length", fontsize=7, title_fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    anchor = table["anchor_seed"].iloc[0] if "anchor_seed" in table.columns else "?"
    ax.set_title(f"{arch}: layer stability by prompt length (§4.4.2, Fig. 5 / B.4)\nanchor seed {anchor}", fontsize=10)
    save_figure(figure, path)
    return data


# --- §4.7 -------------------------------------------------------------------------------------


def plot_residual_stream(
    cka: pd.DataFrame,
    layer_stability: pd.DataFrame,
    path: str | Path,
    arch: str,
    promptset: str = "primary",
    scope: str = "same_layer",
    kernel: str = "RBF",
    hook: str = "hook_resid_mid",
    pairs: str = "distinct",
) -> pd.DataFrame:
    """Residual-stream CKA between refits against head stability, per layer (§4.7, Fig. 9 / B.8).

    cka: (promptset,) seed_a, seed_b, layer, cka; layer_stability: anchor_seed, layer, mean, std.
    hook: the residual hook the CKA was computed on (config key analysis.cka_hook), named in the labels.
    pairs: how CKA is averaged over refit pairs (`headstab.cka.layer_cka_summary`, config key analysis.cka_pairs).
    Returns per layer: cka_mean, cka_std, n_pairs (over pairs), stability_mean, stability_std (over anchors).
    """
    cka = _filter(cka, "residual CKA table", promptset=promptset)
    stab = _filter(layer_stability, "layer stability", promptset=promptset, scope=scope)
    data = layer_cka_summary(cka, pairs).merge(
        stab.groupby("layer")["mean"].agg(stability_mean="mean", stability_std=lambda x: x.std(ddof=0)).reset_index(),
        on="layer",
    )
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
    _layer_ticks(line_ax, n_layers)
    line_ax.set_ylabel("similarity (CKA or cosine, unitless)")
    line_ax.set_ylim(bottom=min(0.0, line_ax.get_ylim()[0]), top=1.05)
    line_ax.legend(fontsize=7, loc="lower left")
    line_ax.set_title("per layer", fontsize=9)

    palette = _layer_palette(n_layers)
    for i, row in data.iterrows():
        scatter_ax.errorbar(row["stability_mean"], row["cka_mean"], xerr=row["stability_std"], yerr=row["cka_std"],
                            fmt="o", color=palette[i], ecolor=palette[i], elinewidth=0.8, capsize=2,
                            label=f"layer {int(row['layer']) + 1}")
    r, _ = pearson_or_nan(data["stability_mean"].to_numpy(), data["cka_mean"].to_numpy())
    if n_layers >= 3 and np.isfinite(r):
        scatter_ax.set_title(f"CKA vs head stability (Pearson r over layers = {r:.2f})", fontsize=9)
    else:  # undefined for 2 layers or a constant variable
        scatter_ax.set_title("CKA vs head stability", fontsize=9)
    scatter_ax.set_xlabel(STABILITY_LABEL)
    scatter_ax.set_ylabel(f"residual-stream CKA ({hook}, {kernel})")
    scatter_ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1)
    figure.suptitle(f"{arch}: residual stream similarity vs head stability (§4.7, Fig. 9 / B.8; prompts: {promptset})",
                    fontsize=10)
    save_figure(figure, path)
    return data


# --- §4.8 -------------------------------------------------------------------------------------


def plot_ablation_correlation(
    table: pd.DataFrame,
    per_layer: pd.DataFrame,
    trend: Mapping[str, float],
    path: str | Path,
    arch: str,
) -> pd.DataFrame:
    """Ablation importance vs head stability (§4.8, Fig. 10 / B.9).

    table: seed, layer, head, delta_ppl, stability (`ablation_table`); per_layer, trend:
    `ablation_correlation(table)`. Returns per_layer with the trend's fitted r added.
    """
    n_layers = int(table["layer"].max()) + 1
    palette = _layer_palette(n_layers)
    figure = new_figure((10, 3.9))
    scatter_ax, r_ax = figure.subplots(1, 2)
    for layer in range(n_layers):
        rows = table[table["layer"] == layer]
        scatter_ax.scatter(rows["stability"], rows["delta_ppl"], color=palette[layer], s=22,
                           edgecolor="black", linewidth=0.3, label=f"layer {layer + 1}")
    scatter_ax.axhline(0, color="black", linewidth=0.6)
    scatter_ax.set_xlabel("head stability (cosine similarity)")
    scatter_ax.set_ylabel("ΔPPL = ablated − baseline (perplexity)")
    scatter_ax.legend(fontsize=7, ncol=2 if n_layers > 6 else 1, title="one point per head", title_fontsize=7)
    seed = table["seed"].iloc[0] if "seed" in table.columns else "?"
    scatter_ax.set_title(f"zero-ablating hook_z, anchor seed {seed}", fontsize=9)

    data = per_layer.copy()
    x = data["layer"].to_numpy() + 1
    r_ax.axhline(0, color="black", linewidth=0.6)
    r_ax.plot(x, data["pearson_r"], marker="o", color="tab:red", label="Pearson r per layer")
    if np.isfinite(trend.get("slope", np.nan)):
        data["trend_r"] = trend["intercept"] + trend["slope"] * data["layer"]
        r_ax.plot(x, data["trend_r"], linestyle="--", color="black",
                  label=f"linear trend (slope {trend['slope']:+.3f} per layer)")
    _layer_ticks(r_ax, n_layers)
    r_ax.set_ylim(-1.05, 1.05)
    r_ax.set_ylabel("Pearson r (stability, ΔPPL)")
    r_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    r_ax.set_title("correlation per layer", fontsize=9)
    figure.suptitle(f"{arch}: ablation importance vs head stability (§4.8, Fig. 10 / B.9)", fontsize=10)
    save_figure(figure, path)
    return data


# --- §4.5 -------------------------------------------------------------------------------------


def plot_optimizer_stability(
    adam: pd.DataFrame,
    adamw: pd.DataFrame,
    path: str | Path,
    arch_adam: str,
    arch_adamw: str,
    promptset: str = "primary",
    scope: str = "same_layer",
) -> pd.DataFrame:
    """Layer-wise stability of an architecture and its AdamW twin, side by side (§4.5, Fig. 6 / B.6).

    adam, adamw: layer stability tables (anchor_seed, layer, mean, std, + promptset, scope).
    Returns per optimizer and layer: mean (over anchors), anchors_std, heads_std.
    """
    figure = new_figure((10, 3.9))
    axes = figure.subplots(1, 2, sharey=True)
    drawn = []
    for ax, table, arch, optimizer in zip(axes, (adam, adamw), (arch_adam, arch_adamw), ("Adam", "AdamW")):
        stab = _filter(table, f"layer stability of {arch}", promptset=promptset, scope=scope)
        summary = _across_anchors(stab)
        x = summary["layer"].to_numpy() + 1
        colour = OPTIMIZER_COLOURS[optimizer]
        for i, (anchor, rows) in enumerate(stab.groupby("anchor_seed")):
            rows = rows.sort_values("layer")
            ax.plot(rows["layer"] + 1, rows["mean"], color="tab:grey", linewidth=0.7, alpha=0.6,
                    label="one anchor" if i == 0 else None)
        ax.fill_between(x, summary["mean"] - summary["heads_std"], summary["mean"] + summary["heads_std"],
                        color=colour, alpha=0.2, linewidth=0, label="±1 s.d. over heads")
        ax.plot(x, summary["mean"], marker="o", color=colour, label="mean over anchors")
        _layer_ticks(ax, len(summary))
        ax.set_title(f"{arch} ({optimizer})", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        drawn.append(summary.assign(optimizer=optimizer, architecture=arch))
    axes[0].set_ylabel(STABILITY_LABEL)
    figure.suptitle(f"Adam vs AdamW: layer stability (§4.5, Fig. 6 / B.6; prompts: {promptset})", fontsize=10)
    save_figure(figure, path)
    return pd.concat(drawn, ignore_index=True)


def plot_activation_norms(
    norms: pd.DataFrame, path: str | Path, arch_adam: str, arch_adamw: str
) -> pd.DataFrame:
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
            ax.fill_between(x, rows["mean"] - rows["std"], rows["mean"] + rows["std"],
                            color=colour, alpha=0.2, linewidth=0)
            n_refits = int(rows["n_refits"].iloc[0])
            ax.plot(x, rows["mean"], marker="o", color=colour,
                    label=f"{arch_of[optimizer]} ({optimizer}), mean ±1 s.d. over {n_refits} refits")
        _layer_ticks(ax, int(data["layer"].max()) + 1)
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
    """Validation perplexity of every refit, Adam vs AdamW (§4.5, Table B.7).

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
        ax.scatter(i + jitter, values, color=OPTIMIZER_COLOURS[optimizer], alpha=0.7, s=24,
                   edgecolor="black", linewidth=0.3, label="one refit" if i == 0 else None)
        row = data[data["optimizer"] == optimizer].iloc[0]
        ax.errorbar(i + 0.3, row["mean"], yerr=row["std"], fmt="D", color="black", capsize=4,
                    label="mean ±1 s.d." if i == 0 else None)
    ax.set_xticks(range(len(order)), [f"{arch_of[o]}\n({o})" for o in order])
    ax.set_xlim(-0.5, len(order) - 0.3)
    ax.set_ylabel(f"validation perplexity on {corpus}")
    ax.set_xlabel("architecture (optimizer)")
    ax.legend(fontsize=7, loc="best")
    ax.set_title(
        "Adam vs AdamW: performance parity (§4.5, Table B.7)\n"
        f"Welch t = {comparison['welch_t']:.2f}, p = {comparison['welch_p']:.3g}; "
        f"Mann-Whitney p = {comparison['mannwhitney_p']:.3g}",
        fontsize=9,
    )
    save_figure(figure, path)
    return data


# --- §4.6 -------------------------------------------------------------------------------------

_HEAD_CMAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds")
_OPTIMIZER_SHADE = {"Adam": 0.85, "AdamW": 0.5}
_MARKERS = {False: "o", True: "^"}


def _depth_encoding(summary: pd.DataFrame) -> tuple[dict, dict]:
    """Colour per (n_heads, optimizer) (hue by heads, shade by optimizer) and x-offset per group."""
    import matplotlib

    heads = sorted(summary["n_heads"].unique())
    colours = {}
    for i, n_heads in enumerate(heads):
        cmap = matplotlib.colormaps[_HEAD_CMAPS[i % len(_HEAD_CMAPS)]]
        for optimizer, shade in _OPTIMIZER_SHADE.items():
            colours[(n_heads, optimizer)] = cmap(shade)
    # Groups present at each depth sit side by side around that depth's tick, so no gaps appear.
    offsets = {}
    for depth, rows in summary.groupby("n_layers"):
        keys = rows[["n_heads", "optimizer", "attention_only"]].drop_duplicates()
        groups = sorted(keys.itertuples(index=False, name=None))
        spacing = min(0.2, 0.8 / len(groups))
        for i, group in enumerate(groups):
            offsets[(depth,) + group] = (i - (len(groups) - 1) / 2) * spacing
    return colours, offsets


def _depth_panel(ax, summary: pd.DataFrame, value: str, colours: dict, offsets: dict) -> pd.DataFrame:
    depths = sorted(summary["n_layers"].unique())
    x_of = {d: i for i, d in enumerate(depths)}
    means = (
        summary.groupby(["architecture", "n_layers", "n_heads", "optimizer", "attention_only"])[value]
        .agg(mean="mean", std=lambda x: x.std(ddof=0), n="count")
        .reset_index()
    )
    for row in means.itertuples(index=False):
        key = (row.n_layers, row.n_heads, row.optimizer, row.attention_only)
        x = x_of[row.n_layers] + offsets[key]
        colour = colours[(row.n_heads, row.optimizer)]
        points = summary.loc[summary["architecture"] == row.architecture, value]
        ax.scatter(np.full(len(points), x), points, color=colour, marker=_MARKERS[bool(row.attention_only)],
                   s=12, alpha=0.45, linewidth=0)
        ax.errorbar(x, row.mean, yerr=row.std, fmt=_MARKERS[bool(row.attention_only)], color=colour,
                    markeredgecolor="black", markeredgewidth=0.6, markersize=8, ecolor="black",
                    elinewidth=0.8, capsize=2)
    ax.set_xticks(range(len(depths)), [str(d) for d in depths])
    ax.set_xlabel("architecture depth L (number of layers)")
    return means


def _depth_legend(figure: Figure, summary: pd.DataFrame, colours: dict) -> None:
    handles = []
    for (n_heads, optimizer), colour in colours.items():
        if ((summary["n_heads"] == n_heads) & (summary["optimizer"] == optimizer)).any():
            handles.append(Line2D([], [], marker="s", linestyle="", color=colour, markersize=8,
                                  label=f"{n_heads} heads, {optimizer}"))
    for attention_only, marker in _MARKERS.items():
        if (summary["attention_only"] == attention_only).any():
            handles.append(Line2D([], [], marker=marker, linestyle="", color="grey", markeredgecolor="black",
                                  markersize=8, label="attention-only" if attention_only else "with MLP"))
    handles.append(Line2D([], [], marker="o", linestyle="", color="grey", alpha=0.45, markersize=4,
                          label="one anchor (small)"))
    handles.append(Line2D([], [], marker="o", linestyle="-", color="black", markersize=0,
                          label="mean ±1 s.d. over anchors"))
    figure.legend(handles=handles, loc="outside right center", fontsize=7, frameon=False)


def _check_summary(summary: pd.DataFrame, needed: tuple[str, ...]) -> None:
    missing = [c for c in needed if c not in summary.columns]
    if missing:
        raise ValueError(f"stability-gap summary lacks columns {missing}; has {list(summary.columns)}")


_SUMMARY_COLUMNS = ("architecture", "n_layers", "n_heads", "optimizer", "attention_only", "anchor_seed")


def plot_stability_gap(summary: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """ΔS = S_lmax - S_lmin against depth for every architecture and anchor (§4.6, Fig. 7).

    summary: `stability_gap_table` rows of all architectures with architecture, n_layers, n_heads,
    optimizer ('Adam' | 'AdamW'), attention_only added. Marker: MLP (circle) or attention-only
    (triangle); hue: number of heads; shade: optimizer (dark Adam, light AdamW).
    Returns per architecture: mean, std, n of delta_s.
    """
    _check_summary(summary, _SUMMARY_COLUMNS + ("delta_s",))
    colours, offsets = _depth_encoding(summary)
    figure = new_figure((8.5, 4.2))
    ax = figure.add_subplot()
    means = _depth_panel(ax, summary, "delta_s", colours, offsets)
    ax.set_ylabel("stability gap ΔS = S(l_max) − S(l_min)\n(cosine similarity)")
    ax.set_title("Stability gap across architectures (§4.6, Fig. 7)", fontsize=10)
    _depth_legend(figure, summary, colours)
    save_figure(figure, path)
    return means


def plot_extreme_layer_depth(summary: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Relative depth r = l/L of the most and least stable layer (§4.6, Fig. 8).

    summary: as for `plot_stability_gap`, with r_max and r_min. Returns per architecture and
    extreme ('r_max' | 'r_min'): mean, std, n.
    """
    _check_summary(summary, _SUMMARY_COLUMNS + ("r_max", "r_min"))
    colours, offsets = _depth_encoding(summary)
    figure = new_figure((11, 4.2))
    axes = figure.subplots(1, 2, sharey=True)
    drawn = []
    for ax, value, title in zip(axes, ("r_max", "r_min"), ("most stable layer", "least stable layer")):
        drawn.append(_depth_panel(ax, summary, value, colours, offsets).assign(extreme=value))
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 1.08)
    axes[0].set_ylabel("relative depth r = l / L (l counted from 1)")
    figure.suptitle("Position of the extreme layers (§4.6, Fig. 8)", fontsize=10)
    _depth_legend(figure, summary, colours)
    save_figure(figure, path)
    return pd.concat(drawn, ignore_index=True)


# --- §4.9 -------------------------------------------------------------------------------------


def plot_meta_sne(table: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """meta-SNE of all heads of all refits and architectures (§4.9, Fig. 11).

    table: `meta_sne_table` output (tsne_x, tsne_y, relative_depth, optimizer, attention_only, embedding).
    Panels Adam | AdamW, on shared axes for a joint embedding and on their own axes when each optimizer
    was embedded alone; colour: relative depth (layer + 1) / L; marker: MLP (circle) or attention-only
    (triangle). Returns the number of heads per panel.
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
        for attn, marker in _MARKERS.items():
            rows = panel[attention_only.loc[panel.index] == attn]
            if rows.empty:
                continue
            mappable = ax.scatter(rows["tsne_x"], rows["tsne_y"], c=rows["relative_depth"], cmap="viridis",
                                  vmin=0, vmax=1, marker=marker, s=14, alpha=0.85, linewidth=0.2,
                                  edgecolor="black", label="attention-only" if attn else "with MLP")
        n_archs = panel["architecture"].nunique() if "architecture" in panel.columns else "?"
        ax.set_title(f"{optimizer}: {len(panel)} heads, {n_archs} architectures", fontsize=9)
        ax.set_xlabel("t-SNE 1 (arbitrary units)")
        if not panel.empty:
            # grey handles: the scatter's own handle would show an arbitrary depth colour
            handles = [
                Line2D([], [], marker=_MARKERS[attn], linestyle="", color="grey", markeredgecolor="black",
                       markeredgewidth=0.3, label="attention-only" if attn else "with MLP")
                for attn in (False, True) if (attention_only.loc[panel.index] == attn).any()
            ]
            ax.legend(handles=handles, fontsize=7, loc="best")
        counts.append((optimizer, len(panel)))
    axes[0].set_ylabel("t-SNE 2 (arbitrary units)")
    if mappable is not None:
        figure.colorbar(mappable, ax=axes, label="relative depth (layer + 1) / L", shrink=0.9)
    kind = "one joint t-SNE" if joint else "one t-SNE per optimizer (axes not comparable)"
    figure.suptitle(f"meta-SNE of attention heads (§4.9, Fig. 11; {kind})", fontsize=10)
    save_figure(figure, path)
    return pd.DataFrame(counts, columns=["optimizer", "n_heads"])
