"""headstab.plots.meta_sne: §4.9 figure: meta-SNE of all heads."""

import numpy as np
import pandas as pd

from headstab.plots.meta_sne import plot_meta_sne
from plots.conftest import N_HEADS, SEEDS


def test_meta_sne(tmp_path, assert_written):
    rng = np.random.default_rng(2)
    rows = []
    for arch, n_layers in (("l2_h8", 2), ("l2_h8_attn", 2), ("l4_h8_wd", 4), ("l4_h8_attn_wd", 4)):
        for seed in SEEDS:
            for layer in range(n_layers):
                for head in range(N_HEADS):
                    depth = (layer + 1) / n_layers
                    rows.append(
                        (
                            arch,
                            seed,
                            layer,
                            head,
                            depth,
                            "AdamW" if arch.endswith("_wd") else "Adam",
                            "_attn" in arch,
                            10 * depth + rng.normal(),
                            rng.normal(),
                        )
                    )
    table = pd.DataFrame(
        rows,
        columns=[
            "architecture",
            "seed",
            "layer",
            "head",
            "relative_depth",
            "optimizer",
            "attention_only",
            "tsne_x",
            "tsne_y",
        ],
    )
    counts = plot_meta_sne(table, tmp_path / "meta_sne.png").set_index("optimizer")["n_heads"]
    assert_written(tmp_path / "meta_sne.png")
    assert counts["Adam"] == 2 * 4 * 2 * N_HEADS and counts["AdamW"] == 2 * 4 * 4 * N_HEADS


def test_meta_sne_titles_name_the_descriptions_and_their_mantel_test(tmp_path, monkeypatch):
    import headstab.plots.meta_sne as meta_sne

    saved = []
    monkeypatch.setattr(meta_sne, "save_figure", lambda figure, path: saved.append(figure))
    table = pd.DataFrame({"architecture": "l2_h8", "seed": 1, "relative_depth": [0.5, 1.0, 1.0], "optimizer": "Adam",
                          "tsne_x": [0.0, 1.0, 2.0], "tsne_y": [0.0, 1.0, 0.0]})  # fmt: skip
    mantel = pd.DataFrame({"description": ["raw", "scale_normalised"], "mantel_r": [0.41, 0.12],
                           "p_value": [0.001, 0.2], "n_permutations": [999, 999], "n_refits": 4,
                           "calibration": ["calibrated", "descriptive"], "note": ""})  # fmt: skip
    plot_meta_sne(table.assign(description="scale_normalised"), tmp_path / "n.png", mantel=mantel)
    title = saved[-1]._suptitle.get_text()
    assert "divided by their norms" in title and "Mantel r = 0.12" in title and "p = 0.2 " in title
    assert "4 refits, 999 layer orders; descriptive" in title
    two_layers = mantel.assign(mantel_r=np.nan, p_value=np.nan, note="needs refits of at least 3 layers")
    plot_meta_sne(table, tmp_path / "t.png", mantel=two_layers)
    assert saved[-1]._suptitle.get_text().endswith("\nno Mantel test of depth: needs refits of at least 3 layers")
    plot_meta_sne(table, tmp_path / "r.png")
    assert "\n" not in saved[-1]._suptitle.get_text()  # the paper's figure alone: one line
