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
