"""Head types across refits: weak and chance-corrected strong universality by layer, and type share by relative
depth, one row of panels per threshold rule (held-out step 0 or fixed, never pooled)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES
from headstab.plots import STABILITY_LABEL, layer_ticks, new_figure, save_figure

__all__ = ["TYPE_LABELS", "plot_head_types", "plot_type_share_by_depth"]

TYPE_LABELS = {
    "previous_token": "previous-token",
    "duplicate_token": "duplicate-token",
    "induction": "induction",
    "bos": "BOS / sink",
}
UNIVERSALITY_LINES = {
    "weak_universality": ("weak: refits with one", "o", "tab:blue"),
    "head_share": ("share of the layer's heads", "x", "tab:gray"),
    "strong_universality_best_match_corrected": ("strong, best match, above chance", "s", "tab:orange"),
    "strong_universality_one_to_one_corrected": ("strong, one-to-one, above chance", "^", "tab:green"),
}
RULE_LABELS = {"held_out_step0": "thresholds from held-out step-0 draws", "fixed": "fixed thresholds"}


def _line(ax, rows: pd.DataFrame, x: np.ndarray, label: str, marker: str, colour: str) -> None:
    estimate = rows["estimate"].to_numpy(dtype=float)
    errors = np.abs(np.stack([estimate - rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float) - estimate]))
    ax.errorbar(x, estimate, yerr=np.nan_to_num(errors), marker=marker, color=colour, label=label, capsize=2)


def plot_head_types(universality: pd.DataFrame, pooled: pd.DataFrame, path: str | Path, arch: str) -> pd.DataFrame:
    """One panel per head type: weak universality, head share and chance-corrected strong universality by layer
    with their intervals; a last panel: layer stability by best match and one-to-one (same-layer, pooled over
    refits) with intervals. The title names the threshold rule.

    universality: UNIVERSALITY_COLUMNS (`headstab.sections.head_types`); pooled: layer_stability_pooled rows
    of one prompt set (scope same_layer used). Returns the universality rows drawn.
    """
    rows = universality[universality["statistic"].isin(UNIVERSALITY_LINES) & universality["type"].isin(HEAD_TYPES)]
    n_layers = int(universality["layer"].max()) + 1
    figure = new_figure((3.0 * (len(HEAD_TYPES) + 1), 3.4))
    axes = figure.subplots(1, len(HEAD_TYPES) + 1)
    lowest = np.nanmin(np.concatenate([rows["ci_low"].to_numpy(float), rows["estimate"].to_numpy(float), [0.0]]))
    for ax, name in zip(axes, HEAD_TYPES, strict=False):
        for statistic, (label, marker, colour) in UNIVERSALITY_LINES.items():
            chosen = rows[(rows["type"] == name) & (rows["statistic"] == statistic)].sort_values("layer")
            _line(ax, chosen, chosen["layer"].to_numpy() + 1, label, marker, colour)
        ax.axhline(0.0, color="black", linewidth=0.5)
        ax.set_ylim(max(lowest, -1.0) - 0.05, 1.05)
        layer_ticks(ax, n_layers)
        ax.set_title(TYPE_LABELS[name], fontsize=9)
    axes[0].set_ylabel("share of refits / heads; strong: above chance")
    axes[0].legend(fontsize=6)
    same = pooled[pooled["scope"] == "same_layer"].sort_values("layer")
    x = same["layer"].to_numpy() + 1
    best = same.rename(columns={"stability": "estimate"})
    _line(axes[-1], best, x, "best match", "o", "tab:blue")
    one = same.rename(
        columns={"stability_one_to_one": "estimate", "one_to_one_ci_low": "lo", "one_to_one_ci_high": "hi"}
    )
    one = one.drop(columns=["ci_low", "ci_high"]).rename(columns={"lo": "ci_low", "hi": "ci_high"})
    _line(axes[-1], one, x, "one-to-one", "^", "tab:green")
    layer_ticks(axes[-1], n_layers)
    axes[-1].set_ylabel(STABILITY_LABEL)
    axes[-1].set_title("best match vs one-to-one", fontsize=9)
    axes[-1].legend(fontsize=6)
    rule = universality["threshold_rule"].iloc[0]
    figure.suptitle(f"{arch}: head types across refits, {RULE_LABELS.get(rule, rule)} (beyond the paper)", fontsize=10)
    save_figure(figure, path)
    return rows


def plot_type_share_by_depth(summary: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """Share of a layer's heads of each type against relative depth (layer + 1) / n_layers: one panel per type and
    threshold rule (a row per rule: the rules are not comparable), one line per architecture with its band.

    summary: UNIVERSALITY_COLUMNS plus architecture (rows of statistic head_share used). Returns the rows drawn.
    """
    rows = summary[(summary["statistic"] == "head_share") & summary["type"].isin(HEAD_TYPES)]
    rules = [rule for rule in RULE_LABELS if rule in set(rows["threshold_rule"])]
    rules += sorted(set(rows["threshold_rule"]) - set(rules))
    figure = new_figure((3.0 * len(HEAD_TYPES), 3.0 * len(rules) + 0.4))
    grid = figure.subplots(len(rules), len(HEAD_TYPES), sharey=True, squeeze=False)
    for axes, rule in zip(grid, rules, strict=True):
        chosen = rows[rows["threshold_rule"] == rule]
        for ax, name in zip(axes, HEAD_TYPES, strict=False):
            for arch, lines in chosen[chosen["type"] == name].groupby("architecture", sort=True):
                lines = lines.sort_values("relative_depth")
                (line,) = ax.plot(lines["relative_depth"], lines["estimate"], marker="o", label=arch)
                ax.fill_between(
                    lines["relative_depth"], lines["ci_low"], lines["ci_high"], color=line.get_color(), alpha=0.15
                )
            ax.set_xlim(0, 1.05)
            ax.set_xlabel("relative depth (layer / n_layers, from 1)")
            ax.set_title(TYPE_LABELS[name], fontsize=9)
        axes[0].set_ylabel(f"{RULE_LABELS.get(rule, rule)}:\nshare of the layer's heads", fontsize=8)
        axes[-1].legend(fontsize=6, ncol=1 + (chosen["architecture"].nunique() > 6))
    figure.suptitle("Head types by relative depth (beyond the paper)", fontsize=10)
    save_figure(figure, path)
    return rows
