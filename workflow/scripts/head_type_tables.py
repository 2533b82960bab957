"""Rule head_type_tables: head_type_scores.csv, head_type_thresholds.csv, pair_stability.csv, head_stability.csv and
layer_stability_pooled.csv of one architecture -> tables/head_types.csv, head_type_universality.csv and
figures/head_types.png (docs/beyond_the_paper.md)."""

import logging

import pandas as pd

from headstab.head_type_thresholds import type_heads
from headstab.joblog import run_job
from headstab.plots.head_types import plot_head_types
from headstab.sections.head_types import universality_table
from headstab.table_files import write_figure_records, write_table
from headstab.table_rows import select_rows


def main():
    inp, out, params = snakemake.input, snakemake.output, snakemake.params
    types = type_heads(pd.read_csv(inp.scores), pd.read_csv(inp.thresholds))
    write_table(types, out.types, snakemake)
    chosen = {"promptset": params.promptset, "scope": "same_layer"}
    pairs = select_rows(pd.read_csv(inp.pair_stability), "pair stability", **chosen)
    heads = select_rows(pd.read_csv(inp.head_stability), "head stability", **chosen)
    options = params.statistics
    universality = universality_table(
        types,
        pairs,
        heads,
        params.seeds,
        n_boot=options["n_boot"],
        seed=options["seed"],
        confidence=options["confidence"],
    ).assign(promptset=params.promptset)
    write_table(universality, out.universality, snakemake)
    logging.info("head types per layer:\n%s", types.groupby(["layer", "type"]).size().to_string())
    pooled = select_rows(pd.read_csv(inp.pooled), "pooled layer stability", promptset=params.promptset)
    plot_head_types(universality, pooled, out.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "head_type_tables", snakemake.log[0], label=snakemake.wildcards.arch)
