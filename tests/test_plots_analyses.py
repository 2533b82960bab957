import numpy as np
import pandas as pd
import pytest

from headstab.ablation import ablation_correlation, ablation_table
from headstab.analyses import norm_stability_correlation, perplexity_comparison, stability_gap_table
from headstab.plots.analyses import (
    plot_ablation_correlation,
    plot_activation_norms,
    plot_extreme_layer_depth,
    plot_meta_sne,
    plot_optimizer_stability,
    plot_perplexity,
    plot_prompt_length,
    plot_qnorm_vs_stability,
    plot_residual_stream,
    plot_stability_gap,
)
from tolerances import reduction_rtol

SEEDS = (1, 2, 3, 4)
N_LAYERS, N_HEADS = 4, 8


def _layer_stability(n_layers=N_LAYERS, promptset="primary", offset=0.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for anchor in SEEDS:
        for layer in range(n_layers):
            mean = 0.9 - 0.12 * layer + offset + rng.normal(0, 0.03)
            rows.append((promptset, "same_layer", anchor, layer, mean, 0.08))
    return pd.DataFrame(rows, columns=["promptset", "scope", "anchor_seed", "layer", "mean", "std"])


def _written(path):
    assert path.exists() and path.stat().st_size > 10_000
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_qnorm_vs_stability(tmp_path):
    rng = np.random.default_rng(0)
    norms = pd.DataFrame(
        [(s, l, m, 2.0 + l + rng.normal(0, 0.2)) for s in SEEDS for l in range(N_LAYERS)
         for m in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")],
        columns=["seed", "layer", "matrix", "frobenius_norm"],
    )
    stab = _layer_stability()
    corr = norm_stability_correlation(norms, stab)
    data = plot_qnorm_vs_stability(norms, stab, corr, tmp_path / "qnorm_vs_stability.png", "l4_h8")
    _written(tmp_path / "qnorm_vs_stability.png")
    assert len(data) == len(SEEDS) * N_LAYERS  # one point per refit and layer


def test_prompt_length(tmp_path):
    table = pd.concat(
        [_layer_stability(promptset=f"len{n}", offset=0.002 * n)[lambda d: d.anchor_seed == 1]
         .assign(prompt_length=n) for n in (5, 10, 20, 30, 40, 50)]
    )
    data = plot_prompt_length(table, tmp_path / "prompt_length.png", "l4_h8")
    _written(tmp_path / "prompt_length.png")
    assert list(data.columns) == [5, 10, 20, 30, 40, 50]  # one line per length


def test_residual_stream(tmp_path):
    rows = [(a, b, l, 0.95 - 0.1 * l) for a in SEEDS for b in SEEDS if a < b for l in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    data = plot_residual_stream(cka, _layer_stability(), tmp_path / "residual_stream.png", "l4_h8")
    _written(tmp_path / "residual_stream.png")
    np.testing.assert_allclose(data["cka_mean"], 0.95 - 0.1 * np.arange(N_LAYERS), rtol=reduction_rtol(np.float64, 16))


def test_residual_stream_with_self_pairs_averages_all_ordered_pairs(tmp_path):
    rows = [(a, b, l, 0.7) for a in SEEDS for b in SEEDS if a < b for l in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    data = plot_residual_stream(cka, _layer_stability(), tmp_path / "r.png", "l4_h8", pairs="ordered_with_self")
    n = len(SEEDS)
    np.testing.assert_allclose(data["cka_mean"], (n * (n - 1) * 0.7 + n) / n**2, rtol=reduction_rtol(np.float64, n**2))
    assert (data["n_pairs"] == n**2).all()


def test_residual_stream_labels_name_the_hook(tmp_path, monkeypatch):
    import headstab.plots.analyses as analyses

    saved = []
    monkeypatch.setattr(analyses, "save_figure", lambda figure, path: saved.append(figure))
    rows = [(a, b, l, 0.9 - 0.1 * l) for a in SEEDS for b in SEEDS if a < b for l in range(N_LAYERS)]
    cka = pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"]).assign(promptset="primary")
    plot_residual_stream(cka, _layer_stability(), tmp_path / "r.png", "l4_h8", hook="hook_resid_pre")
    line_ax, scatter_ax = saved[0].axes
    assert "hook_resid_pre" in scatter_ax.get_ylabel()
    assert any("hook_resid_pre" in text.get_text() for text in line_ax.get_legend().get_texts())


def test_ablation_correlation(tmp_path):
    rng = np.random.default_rng(1)
    stability = rng.uniform(0.2, 1.0, (N_LAYERS, N_HEADS))
    heads = pd.DataFrame(
        [(1, l, h, stability[l, h]) for l in range(N_LAYERS) for h in range(N_HEADS)],
        columns=["anchor_seed", "layer", "head", "stability"],
    )
    ppl = 20 + stability * (np.arange(N_LAYERS)[:, None] - 1.5) + rng.normal(0, 0.1, stability.shape)
    table = ablation_table(ppl, 20.0, heads, seed=1)
    per_layer, trend = ablation_correlation(table)
    data = plot_ablation_correlation(table, per_layer, trend, tmp_path / "ablation_correlation.png", "l4_h8")
    _written(tmp_path / "ablation_correlation.png")
    assert trend["slope"] > 0 and "trend_r" in data.columns


def test_optimizer_stability(tmp_path):
    data = plot_optimizer_stability(
        _layer_stability(), _layer_stability(offset=-0.1, seed=1), tmp_path / "optimizer_stability.png",
        "l4_h8", "l4_h8_wd",
    )
    _written(tmp_path / "optimizer_stability.png")
    assert set(data["optimizer"]) == {"Adam", "AdamW"} and len(data) == 2 * N_LAYERS


def test_activation_norms(tmp_path):
    rows = [(o, s, l, a, (10 if o == "Adam" else 6) * (1 + l) * (1.5 if a == "resid_mid" else 1) + s * 0.1)
            for o in ("Adam", "AdamW") for s in SEEDS for l in range(N_LAYERS) for a in ("attn_out", "resid_mid")]
    norms = pd.DataFrame(rows, columns=["optimizer", "seed", "layer", "activation", "mean_norm"])
    data = plot_activation_norms(norms, tmp_path / "activation_norms.png", "l4_h8", "l4_h8_wd")
    _written(tmp_path / "activation_norms.png")
    assert (data["n_refits"] == len(SEEDS)).all()


def test_perplexity(tmp_path):
    ppl = pd.DataFrame({"optimizer": ["Adam"] * 4 + ["AdamW"] * 4, "seed": list(SEEDS) * 2,
                        "perplexity": [30.1, 29.5, 30.8, 30.2, 30.5, 31.0, 29.9, 30.4]})
    comparison = perplexity_comparison(ppl.perplexity[:4], ppl.perplexity[4:])
    data = plot_perplexity(ppl, comparison, tmp_path / "perplexity.png", "l4_h8", "l4_h8_wd")
    _written(tmp_path / "perplexity.png")
    assert data.set_index("optimizer").loc["Adam", "mean"] == pytest.approx(30.15)


def _gap_summary():
    frames = []
    for i, (arch, n_layers, n_heads) in enumerate(
        [("l2_h8", 2, 8), ("l4_h8", 4, 8), ("l4_h16", 4, 16), ("l8_h8", 8, 8)]
    ):
        for suffix in ("", "_attn", "_wd", "_attn_wd"):
            name = arch + suffix
            gap = stability_gap_table(_layer_stability(n_layers, seed=i + len(suffix)), n_layers)
            frames.append(gap.assign(architecture=name, n_layers=n_layers, n_heads=n_heads,
                                     optimizer="AdamW" if name.endswith("_wd") else "Adam",
                                     attention_only="_attn" in name))
    return pd.concat(frames, ignore_index=True)


def test_stability_gap_and_extreme_layer_depth(tmp_path):
    summary = _gap_summary()
    gap = plot_stability_gap(summary, tmp_path / "stability_gap.png")
    depth = plot_extreme_layer_depth(summary, tmp_path / "extreme_layer_depth.png")
    _written(tmp_path / "stability_gap.png")
    _written(tmp_path / "extreme_layer_depth.png")
    assert len(gap) == summary["architecture"].nunique() == 16
    assert len(depth) == 2 * 16 and depth["mean"].between(0, 1).all()
    with pytest.raises(ValueError, match="n_heads"):
        plot_stability_gap(summary.drop(columns="n_heads"), tmp_path / "x.png")


def test_meta_sne(tmp_path):
    rng = np.random.default_rng(2)
    rows = []
    for arch, n_layers in (("l2_h8", 2), ("l2_h8_attn", 2), ("l4_h8_wd", 4), ("l4_h8_attn_wd", 4)):
        for seed in SEEDS:
            for layer in range(n_layers):
                for head in range(N_HEADS):
                    depth = (layer + 1) / n_layers
                    rows.append((arch, seed, layer, head, depth, "AdamW" if arch.endswith("_wd") else "Adam",
                                 "_attn" in arch, 10 * depth + rng.normal(), rng.normal()))
    table = pd.DataFrame(rows, columns=["architecture", "seed", "layer", "head", "relative_depth", "optimizer",
                                        "attention_only", "tsne_x", "tsne_y"])
    counts = plot_meta_sne(table, tmp_path / "meta_sne.png").set_index("optimizer")["n_heads"]
    _written(tmp_path / "meta_sne.png")
    assert counts["Adam"] == 2 * 4 * 2 * N_HEADS and counts["AdamW"] == 2 * 4 * 4 * N_HEADS
