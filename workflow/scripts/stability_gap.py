"""Rule stability_gap: layer_stability.csv and head_stability.csv of every architecture ->
summary/tables/stability_gap.csv (with ΔS under the nulls), stability_gap_depth.csv, summary/figures/
stability_gap.png (Fig. 7) and extreme_layer_depth.png (Fig. 8) (paper §4.6)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.stability_gap import plot_extreme_layer_depth, plot_stability_gap
from headstab.sections.stability_gap import gap_depth_table, stability_gap_summary


def main():
    facts, out, options = snakemake.params.architectures, snakemake.output, snakemake.params.statistics
    inp = snakemake.input
    layers = {arch: pd.read_csv(path) for arch, path in zip(facts, inp.layer_stability, strict=True)}
    heads = {arch: pd.read_csv(path) for arch, path in zip(facts, inp.head_stability, strict=True)}
    nulls = {key: options[key] for key in ("permutations", "seed", "confidence")}
    summary = stability_gap_summary(layers, facts, snakemake.params.promptset, head_stability=heads, nulls=nulls)
    summary.to_csv(out.table, index=False)
    depth = gap_depth_table(summary, options["permutations"], options["seed"])
    depth.to_csv(out.depth, index=False)
    logging.info(
        "stability gap per architecture (ΔS, its mean when no layer differs):\n%s",
        summary.groupby("architecture")[["delta_s", "delta_s_layer_null"]].mean().round(3),
    )
    logging.info("ΔS against depth:\n%s", depth.to_string(index=False))
    plot_stability_gap(summary, out.stability_gap)
    plot_extreme_layer_depth(summary, out.extreme_layer_depth)


run_job(main, "stability_gap", snakemake.log[0])
