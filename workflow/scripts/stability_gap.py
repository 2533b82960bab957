"""Rule stability_gap: layer_stability.csv of every architecture -> summary/tables/stability_gap.csv,
summary/figures/stability_gap.png (Fig. 7) and extreme_layer_depth.png (Fig. 8) (paper §4.6)."""

import logging

import pandas as pd

from headstab.analyses import stability_gap_table
from headstab.joblog import run_job
from headstab.plots.analyses import plot_extreme_layer_depth, plot_stability_gap


def main():
    facts = snakemake.params.architectures
    frames = []
    for arch, path in zip(facts, snakemake.input.layer_stability, strict=True):
        gap = stability_gap_table(pd.read_csv(path), facts[arch]["n_layers"], promptset=snakemake.params.promptset)
        frames.append(gap.assign(architecture=arch, **facts[arch]))
    columns = ["architecture", "n_layers", "n_heads", "optimizer", "attention_only", "anchor_seed",
               "s_max", "s_min", "delta_s", "l_max", "l_min", "r_max", "r_min"]
    summary = pd.concat(frames, ignore_index=True)[columns]
    summary.to_csv(snakemake.output.table, index=False)
    logging.info("stability gap per architecture:\n%s", summary.groupby("architecture")["delta_s"].mean().round(3))
    plot_stability_gap(summary, snakemake.output.stability_gap)
    plot_extreme_layer_depth(summary, snakemake.output.extreme_layer_depth)


run_job(main, "stability_gap", snakemake.log[0])
