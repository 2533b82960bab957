"""Figure hygiene: every per-architecture figure, drawn at the demo's size (4 refits, 8 heads) for 2, 4, 8 and
12 layers with the longest demo-style names, keeps its text inside the canvas (the autouse check of
conftest.py runs on every saved figure); the check itself finds a clipped title."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headstab.plots.stability as stability_plots
from headstab.plots import new_figure, save_figure, text_outside_canvas
from headstab.plots.chance import plot_stability_against_chance
from headstab.plots.optimizers import plot_optimizer_stability
from headstab.plots.prompt_length import plot_prompt_length
from headstab.plots.residual_cka import plot_residual_stream
from headstab.plots.stability_gap import plot_extreme_layer_depth, plot_stability_gap
from headstab.plots.training_curves import plot_training_curves
from headstab.sections.stability_gap import stability_gap_table
from headstab.sections.training_curves import final_losses, training_curves
from plots.test_chance import pooled
from plots.test_stability import figure_tables

DEPTHS = (2, 4, 8, 12)
SEEDS, N_HEADS = [1, 2, 3, 4], 8


def demo_tables(n_layers: int) -> dict[str, pd.DataFrame]:
    """The stability tables of 4 refits x n_layers x 8 heads from a random symmetric similarity tensor."""
    rng = np.random.default_rng(n_layers)
    n = len(SEEDS)
    similarity = rng.uniform(0.2, 0.9, size=(n, n, n_layers, N_HEADS, n_layers, N_HEADS)).astype(np.float32)
    similarity = (similarity + similarity.transpose(1, 0, 4, 5, 2, 3)) / 2
    for seed in range(n):
        similarity[seed, seed] = np.eye(n_layers * N_HEADS).reshape(n_layers, N_HEADS, n_layers, N_HEADS)
    return figure_tables(similarity, SEEDS)


@pytest.mark.parametrize("n_layers", DEPTHS)
def test_stability_figures_keep_their_text_inside(n_layers, tmp_path):
    arch, t = f"l{n_layers}_h8_attn_wd", demo_tables(n_layers)
    stability_plots.plot_head_stability(t["heads"], tmp_path / "head.png", arch)
    stability_plots.plot_layer_stability(t["layers"], tmp_path / "layer.png", arch)
    stability_plots.plot_pair_stability(t["pairs"], tmp_path / "pair.png", arch)
    stability_plots.plot_cross_layer_stability(t["heads"], t["layers"], tmp_path / "cross.png", arch)
    stability_plots.plot_alignment_map(t["alignment"], tmp_path / "map.png", arch, dispersion_table=t["dispersion"])
    stability_plots.plot_commonness(t["commonness"], tmp_path / "common.png", arch)


@pytest.mark.parametrize("n_layers", DEPTHS)
def test_section_figures_keep_their_text_inside(n_layers, tmp_path, layer_stability):
    arch = f"l{n_layers}_h8_attn"
    plot_optimizer_stability(
        layer_stability(n_layers), layer_stability(n_layers, seed=1), tmp_path / "o.png", arch, f"{arch}_wd"
    )
    lengths = pd.concat(
        [layer_stability(n_layers, promptset=f"len{n}", chance=True).query("anchor_seed == 1") for n in (5, 10, 50)]
    ).assign(prompt_length=lambda d: d.promptset.str[3:].astype(int))
    plot_prompt_length(lengths, tmp_path / "p.png", arch)
    rows = [(a, b, layer, 0.9 - 0.05 * layer) for a in SEEDS for b in SEEDS if a < b for layer in range(n_layers)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    plot_residual_stream(cka, layer_stability(n_layers), tmp_path / "r.png", arch)
    logs = {seed: pd.DataFrame({"step": [16, 32], "tokens": [16384, 32768], "loss": [6.0, 5.0 + seed / 10]})
            for seed in SEEDS}  # fmt: skip
    curves = training_curves(logs)
    plot_training_curves(curves, final_losses(curves), tmp_path / "t.png", arch)


def test_figures_across_architectures_keep_every_name_inside(tmp_path, layer_stability):
    facts = []
    for n_layers in DEPTHS:
        for suffix in ("", "_attn", "_wd", "_attn_wd"):
            name = f"l{n_layers}_h8{suffix}"
            gap = stability_gap_table(layer_stability(n_layers, seed=n_layers + len(suffix)), n_layers)
            facts.append(gap.assign(architecture=name, n_layers=n_layers, n_heads=N_HEADS,
                                    optimizer="AdamW" if "_wd" in name else "Adam", attention_only="_attn" in name))  # fmt: skip
    summary = pd.concat(facts, ignore_index=True)
    plot_stability_gap(summary, tmp_path / "gap.png")
    plot_extreme_layer_depth(summary, tmp_path / "depth.png")
    chance = pd.concat([pooled(f"l{n}_h8_attn_wd", n) for n in DEPTHS], ignore_index=True)
    plot_stability_against_chance(chance, tmp_path / "chance.png", "primary")


def test_a_title_wider_than_the_figure_is_found_and_the_saved_canvas_grows_to_hold_it(tmp_path):
    figure = new_figure((2.0, 2.0))
    figure.add_subplot().plot([0, 1])
    figure.suptitle("a title much wider than a two-inch figure can hold")
    assert len(text_outside_canvas(figure)) == 1 and "a title much wider" in text_outside_canvas(figure)[0]
    save_figure(figure, tmp_path / "wide.png")
    assert text_outside_canvas(figure) == [] and figure.get_size_inches()[0] > 2.0
