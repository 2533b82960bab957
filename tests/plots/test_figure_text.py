"""Figure hygiene: every figure the workflow draws (per architecture, per optimizer pair and across
architectures), drawn at the demo's size (4 refits, 8 heads) for 2, 4, 8 and
12 layers with the longest demo-style names, keeps its text inside the canvas (the autouse check of
conftest.py runs on every saved figure); the check itself finds a clipped title."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headstab.plots.stability as stability_plots
from headstab.plots import new_figure, save_figure, text_outside_canvas
from headstab.plots.ablation import plot_ablation_correlation
from headstab.plots.chance import plot_seeds_needed, plot_stability_against_chance
from headstab.plots.commonness import plot_commonness
from headstab.plots.effective_rank import plot_rank_by_layer, plot_rank_vs_stability
from headstab.plots.headline import plot_stability_by_depth
from headstab.plots.layer_robustness import plot_robustness_stages, plot_robustness_vs_stability
from headstab.plots.meta_sne import plot_meta_sne
from headstab.plots.optimizers import plot_activation_norms, plot_optimizer_stability, plot_perplexity
from headstab.plots.prompt_length import plot_prompt_length
from headstab.plots.residual_cka import plot_residual_stream
from headstab.plots.seed_grid import FRACTION_LABELS, KIND_LABELS, plot_seed_grid
from headstab.plots.stability_gap import plot_extreme_layer_depth, plot_stability_gap
from headstab.plots.training_curves import plot_optimizer_training_curves, plot_training_curves
from headstab.plots.training_dynamics import plot_stability_along_training
from headstab.plots.weight_norms import plot_weight_norm_correlation
from headstab.sections.ablation import ablation_correlation, ablation_table
from headstab.sections.optimizers import perplexity_comparison
from headstab.sections.stability_gap import stability_gap_table
from headstab.sections.training_curves import final_losses, training_curves
from headstab.sections.weight_norms import norm_stability_correlation
from headstab.statistics.seeds_needed import seeds_needed
from plots.test_chance import pooled
from plots.test_stability import figure_tables

DEPTHS = (2, 4, 8, 12)
# Per-architecture figures are drawn at the fewest and the most layers: labels crowd as layers grow, and the
# smallest canvas is the other edge (the depths between are drawn by the across-architecture figures).
EDGE_DEPTHS = (2, 12)
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


@pytest.mark.parametrize("n_layers", EDGE_DEPTHS)
def test_stability_figures_keep_their_text_inside(n_layers, tmp_path):
    arch, t = f"l{n_layers}_h8_attn_wd", demo_tables(n_layers)
    stability_plots.plot_head_stability(t["heads"], tmp_path / "head.png", arch, "primary")
    stability_plots.plot_layer_stability(t["layers"], tmp_path / "layer.png", arch, "primary")
    stability_plots.plot_pair_stability(t["pairs"], tmp_path / "pair.png", arch, "primary")
    stability_plots.plot_cross_layer_stability(t["heads"], t["layers"], tmp_path / "cross.png", arch, "primary")
    stability_plots.plot_alignment_map(
        t["alignment"], tmp_path / "map.png", arch, "primary", dispersion_table=t["dispersion"]
    )
    common = t["commonness"].assign(commonness_above_null=0.1, commonness_excl_self_above_null=-0.02)
    plot_commonness(common, tmp_path / "common.png", arch, "primary")  # with the above-null panel


@pytest.mark.parametrize("n_layers", EDGE_DEPTHS)
def test_section_figures_keep_their_text_inside(n_layers, tmp_path, layer_stability):
    arch = f"l{n_layers}_h8_attn"
    plot_optimizer_stability(
        layer_stability(n_layers), layer_stability(n_layers, seed=1), tmp_path / "o.png", arch, f"{arch}_wd", "primary"
    )
    lengths = pd.concat(
        [layer_stability(n_layers, promptset=f"len{n}", chance=True).query("anchor_seed == 1") for n in (5, 10, 50)]
    ).assign(prompt_length=lambda d: d.promptset.str[3:].astype(int))
    plot_prompt_length(lengths, tmp_path / "p.png", arch)
    rows = [(a, b, layer, 0.9 - 0.05 * layer) for a in SEEDS for b in SEEDS if a < b for layer in range(n_layers)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    plot_residual_stream(cka, layer_stability(n_layers), tmp_path / "r.png", arch, "primary")
    logs = {seed: pd.DataFrame({"step": [16, 32], "tokens": [16384, 32768], "loss": [6.0, 5.0 + seed / 10]})
            for seed in SEEDS}  # fmt: skip
    curves = training_curves(logs)
    plot_training_curves(curves, final_losses(curves), tmp_path / "t.png", arch)
    finals = pd.concat([final_losses(curves).assign(optimizer=name) for name in ("Adam", "AdamW")])
    plot_optimizer_training_curves({"Adam": curves, "AdamW": curves}, finals, tmp_path / "ot.png", arch, f"{arch}_wd")


@pytest.mark.parametrize("n_layers", EDGE_DEPTHS)
def test_per_layer_analysis_figures_keep_their_text_inside(n_layers, tmp_path, layer_stability):
    arch, rng, t = f"l{n_layers}_h8_attn_wd", np.random.default_rng(n_layers), demo_tables(n_layers)
    matrices = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")
    norms = pd.DataFrame([(s, layer, m, 2.0 + layer + rng.normal(0, 0.2)) for s in SEEDS
                          for layer in range(n_layers) for m in matrices],
                         columns=["seed", "layer", "matrix", "frobenius_norm"])  # fmt: skip
    norms["whole_layer_norm"] = norms["frobenius_norm"]
    stab = layer_stability(n_layers)
    correlation = norm_stability_correlation(norms, stab, "primary")
    plot_weight_norm_correlation(norms, stab, correlation, tmp_path / "w.png", arch, "primary")
    heads = t["heads"].query("anchor_seed == 1")
    ppl = 20 + rng.uniform(-1, 1, (n_layers, N_HEADS))
    table = ablation_table(ppl, 20.0, heads, seed=1)
    plot_ablation_correlation(table, *ablation_correlation(table), tmp_path / "a.png", arch)
    pr = pd.DataFrame([(s, "all", layer, h, rng.uniform(1, 8)) for s in SEEDS for layer in range(n_layers)
                       for h in range(N_HEADS)], columns=["seed", "positions", "layer", "head", "pr_uncentred"])  # fmt: skip
    plot_rank_vs_stability(pr, t["heads"], tmp_path / "pr.png", arch)
    curve = pd.DataFrame([("layer_stability", layer, n, 0.1 / n, 0.001, 5, 100) for layer in range(n_layers)
                          for n in (3, 4)] + [("delta_s", -1, n, 0.2 / n, 0.001, 5, 100) for n in (3, 4)],
                         columns=["statistic", "layer", "n_refits", "ci_width", "ci_width_sd", "n_subsets", "n_boot"])  # fmt: skip
    plot_seeds_needed(curve, seeds_needed(curve, 0.01), tmp_path / "s.png", arch)


@pytest.mark.parametrize("n_layers", EDGE_DEPTHS)
def test_training_and_intervention_figures_keep_their_text_inside(n_layers, tmp_path):
    arch, layers = f"l{n_layers}_h8_attn_wd", np.arange(n_layers)
    band = pd.DataFrame({"layer": layers, "estimate": 0.8 - 0.02 * layers}).assign(
        ci_low=lambda d: d.estimate - 0.05, ci_high=lambda d: d.estimate + 0.05)  # fmt: skip
    grid = pd.concat([band.assign(statistic=name) for name in (*KIND_LABELS, *FRACTION_LABELS)])
    plot_seed_grid(grid, tmp_path / "grid.png", arch)
    steps = pd.concat([band.assign(step=step) for step in (0, 36, 144)]).rename(columns={"estimate": "stability"})
    steps = steps.assign(promptset="primary", null=0.2, null_ci_low=0.15, null_ci_high=0.25, n_boot=1000)
    plot_stability_along_training(steps, tmp_path / "steps.png", arch)
    robust = pd.concat([band.assign(condition="drop"), band.iloc[:-1].assign(condition="swap")])
    robust = robust.rename(columns={"estimate": "stability"}).assign(
        top1_agreement=0.9, delta_ppl=2.0, kl_divergence=0.3
    )
    plot_robustness_vs_stability(pd.concat([robust.assign(seed=s) for s in SEEDS]), tmp_path / "rob.png", arch)
    norms = pd.DataFrame([(o, s, layer, a, 5.0 + layer + s) for o in ("Adam", "AdamW") for s in SEEDS
                          for layer in layers for a in ("attn_out", "resid_mid")],
                         columns=["optimizer", "seed", "layer", "activation", "mean_norm"])  # fmt: skip
    plot_activation_norms(norms, tmp_path / "norms.png", f"l{n_layers}_h8_attn", arch)
    ppl = pd.DataFrame(
        {"optimizer": ["Adam"] * 4 + ["AdamW"] * 4, "seed": [*SEEDS, *SEEDS], "perplexity": 30.0 + np.arange(8) / 10}
    )
    plot_perplexity(ppl, perplexity_comparison(ppl.perplexity[:4], ppl.perplexity[4:] + 0.5), tmp_path / "ppl.png",
                    f"l{n_layers}_h8_attn", arch)  # fmt: skip


def test_figures_across_architectures_keep_every_name_inside(tmp_path, layer_stability):
    facts = []
    for n_layers in DEPTHS:
        for suffix in ("", "_attn", "_wd", "_attn_wd"):
            name = f"l{n_layers}_h8{suffix}"
            gap = stability_gap_table(layer_stability(n_layers, seed=n_layers + len(suffix)), n_layers, "primary")
            facts.append(gap.assign(architecture=name, n_layers=n_layers, n_heads=N_HEADS,
                                    optimizer="AdamW" if "_wd" in name else "Adam", attention_only="_attn" in name))  # fmt: skip
    summary = pd.concat(facts, ignore_index=True)
    plot_stability_gap(summary, tmp_path / "gap.png")
    plot_extreme_layer_depth(summary, tmp_path / "depth.png")
    chance = pd.concat([pooled(f"l{n}_h8_attn_wd", n) for n in DEPTHS], ignore_index=True)
    plot_stability_against_chance(chance, tmp_path / "chance.png", "primary")
    facts = {a: {"n_layers": n, "optimizer": "AdamW" if "_wd" in a else "Adam", "attention_only": "_attn" in a}
             for a, n in summary.groupby("architecture")["n_layers"].first().items()}  # fmt: skip
    per_layer = pd.DataFrame([(a, layer, 0.8 - 0.02 * layer, 0.7, 0.9) for a, f in facts.items()
                              for layer in range(f["n_layers"])],
                             columns=["architecture", "layer", "estimate", "ci_low", "ci_high"])  # fmt: skip
    plot_stability_by_depth(per_layer.assign(statistic="layer stability", null=0.3), facts, tmp_path / "sd.png")
    plot_rank_by_layer(per_layer.assign(statistic="pr_mean", positions="all"), facts, tmp_path / "rank.png")
    stages = pd.concat([per_layer.assign(condition=c) for c in ("drop", "swap")]).rename(columns={"estimate": "mean"})
    stages["relative_depth"] = stages["layer"] / stages["architecture"].map(lambda a: facts[a]["n_layers"])
    plot_robustness_stages(pd.concat([stages.assign(metric=m) for m in ("top1_agreement", "kl_divergence")]),
                           tmp_path / "stages.png")  # fmt: skip
    heads = summary[["architecture", "optimizer", "attention_only", "n_layers"]].drop_duplicates()
    heads = heads.loc[heads.index.repeat(heads["n_layers"] * N_HEADS)].reset_index(drop=True)
    heads["relative_depth"] = heads.groupby("architecture").cumcount() // N_HEADS / heads["n_layers"] + 0.01
    plot_meta_sne(heads.assign(seed=1, tsne_x=np.arange(len(heads)) % 17, tsne_y=np.arange(len(heads)) % 5),
                  tmp_path / "sne.png")  # fmt: skip


def test_a_title_wider_than_the_figure_is_found_and_the_saved_canvas_grows_to_hold_it(tmp_path):
    figure = new_figure((2.0, 2.0))
    figure.add_subplot().plot([0, 1])
    figure.suptitle("a title much wider than a two-inch figure can hold")
    assert len(text_outside_canvas(figure)) == 1 and "a title much wider" in text_outside_canvas(figure)[0]
    save_figure(figure, tmp_path / "wide.png")
    assert text_outside_canvas(figure) == [] and figure.get_size_inches()[0] > 2.0
