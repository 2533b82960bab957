"""Rule stability_gap: layer_stability.csv and layer_pseudo_values.csv of every architecture ->
summary/tables/stability_gap.csv (ΔS per anchor, with ΔS of the nulls), layer_tests.csv (refits as units),
stability_gap_depth.csv (architectures as units), summary/figures/stability_gap.png (Fig. 7) and
extreme_layer_depth.png (Fig. 8) (paper §4.1, §4.6)."""

import logging

import pandas as pd

from headstab.joblog import run_job
from headstab.plots.stability_gap import plot_extreme_layer_depth, plot_stability_gap
from headstab.sections.stability_gap import gap_depth_table, layer_tests_table, stability_gap_summary
from headstab.table_files import write_figure_records, write_table


def main():
    facts, out, options = snakemake.params.architectures, snakemake.output, snakemake.params.statistics
    inp = snakemake.input
    layers = {arch: pd.read_csv(path) for arch, path in zip(facts, inp.layer_stability, strict=True)}
    pseudo = {arch: pd.read_csv(path) for arch, path in zip(facts, inp.pseudo_values, strict=True)}
    summary = stability_gap_summary(layers, facts, snakemake.params.promptset)
    write_table(summary, out.table, snakemake)
    tests = layer_tests_table(pseudo, facts, options["permutations"], options["seed"])
    write_table(tests, out.layer_tests, snakemake)
    depth = gap_depth_table(summary, options["permutations"], options["seed"], layer_tests=tests)
    write_table(depth, out.depth, snakemake)
    logging.info("layer tests (refits as units):\n%s", tests.to_string(index=False))
    logging.info("against depth (architectures as units):\n%s", depth.to_string(index=False))
    plot_stability_gap(summary, out.stability_gap)
    plot_extreme_layer_depth(summary, out.extreme_layer_depth)
    write_figure_records(snakemake)


run_job(main, "stability_gap", snakemake.log[0])
