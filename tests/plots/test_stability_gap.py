"""headstab.plots.stability_gap: §4.6 figures: stability gap and depth of the extreme layers."""

import numpy as np
import pandas as pd
import pytest

from headstab.plots.stability_gap import plot_extreme_layer_depth, plot_stability_gap
from headstab.sections.stability_gap import stability_gap_table


def _gap_summary(layer_stability):
    frames = []
    for i, (arch, n_layers, n_heads) in enumerate(
        [("l2_h8", 2, 8), ("l4_h8", 4, 8), ("l4_h16", 4, 16), ("l8_h8", 8, 8)]
    ):
        for suffix in ("", "_attn", "_wd", "_attn_wd"):
            name = arch + suffix
            gap = stability_gap_table(layer_stability(n_layers, seed=i + len(suffix)), n_layers, "primary")
            frames.append(
                gap.assign(
                    architecture=name,
                    n_layers=n_layers,
                    n_heads=n_heads,
                    optimizer="AdamW" if name.endswith("_wd") else "Adam",
                    attention_only="_attn" in name,
                )
            )
    return pd.concat(frames, ignore_index=True)


def test_stability_gap_and_extreme_layer_depth(tmp_path, layer_stability, assert_written):
    summary = _gap_summary(layer_stability)
    gap = plot_stability_gap(summary, tmp_path / "stability_gap.png")
    depth = plot_extreme_layer_depth(summary, tmp_path / "extreme_layer_depth.png")
    assert_written(tmp_path / "stability_gap.png")
    assert_written(tmp_path / "extreme_layer_depth.png")
    assert len(gap) == summary["architecture"].nunique() == 16
    assert len(depth) == 2 * 16 and depth["mean"].between(0, 1).all()
    with pytest.raises(ValueError, match="n_heads"):
        plot_stability_gap(summary.drop(columns="n_heads"), tmp_path / "x.png")


def test_stability_gap_draws_the_chance_floors_range_beside_each_architecture(tmp_path, layer_stability, monkeypatch):
    import headstab.plots.stability_gap as module

    summary = _gap_summary(layer_stability)
    summary["delta_s_prompt_null"] = np.where(summary["anchor_seed"] == summary["anchor_seed"].min(), 0.02, 0.09)
    figures = []
    monkeypatch.setattr(module, "save_figure", lambda figure, path: figures.append(figure))
    plot_stability_gap(summary, tmp_path / "stability_gap.png")
    ax = figures[0].axes[0]
    bars = [line for line in ax.get_lines() if list(line.get_ydata()) == [0.02, 0.09]]
    assert len(bars) == summary["architecture"].nunique()  # smallest to largest anchor's ΔS of the null
    labels = [text.get_text() for text in figures[0].legends[0].get_texts()]
    assert "ΔS of the prompt-permutation null" in labels
