"""Rule stability_gap: layer_stability.csv of every architecture -> summary/tables/stability_gap.csv,
summary/figures/stability_gap.png (Fig. 7) and extreme_layer_depth.png (Fig. 8) (paper §4.6)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.stability_gap import plot_extreme_layer_depth, plot_stability_gap
from headstab.sections.stability_gap import stability_gap_summary


def main():
    facts, out = snakemake.params.architectures, snakemake.output
    tables = {arch: pd.read_csv(path) for arch, path in zip(facts, snakemake.input.layer_stability, strict=True)}
    summary = stability_gap_summary(tables, facts, promptset=snakemake.params.promptset)
    summary.to_csv(out.table, index=False)
    logging.info("stability gap per architecture:\n%s", summary.groupby("architecture")["delta_s"].mean().round(3))
    plot_stability_gap(summary, out.stability_gap)
    plot_extreme_layer_depth(summary, out.extreme_layer_depth)


run_job(main, "stability_gap", snakemake.log[0])
