"""Rule noise_ceiling_tables: noise_ceiling_scores.csv, head_type_thresholds.csv, pair_stability.csv and
layer_stability_pooled.csv of one architecture -> tables/noise_ceiling.csv and figures/noise_ceiling.png: within-refit
reliability of head types, cross-seed agreement and its attenuation-corrected form (docs/beyond_the_paper.md)."""

import pandas as pd

from headstab.head_type_thresholds import type_heads
from headstab.joblog import run_job
from headstab.plots.noise_ceiling import plot_noise_ceiling
from headstab.sections.noise_ceiling import noise_ceiling_table
from headstab.table_files import write_figure_records, write_table
from headstab.table_rows import select_rows


def main():
    inp, out, params = snakemake.input, snakemake.output, snakemake.params
    scores, thresholds = pd.read_csv(inp.scores), pd.read_csv(inp.thresholds)
    first, second = (
        type_heads(select_rows(scores, "noise ceiling scores", probe_half=half).drop(columns="probe_half"), thresholds)
        for half in ("first", "second")
    )
    chosen = {"promptset": params.promptset, "scope": "same_layer"}
    pairs = select_rows(pd.read_csv(inp.pair_stability), "pair stability", **chosen)
    options = params.statistics
    ceiling = noise_ceiling_table(
        first,
        second,
        pairs,
        params.seeds,
        n_boot=options["n_boot"],
        seed=options["seed"],
        confidence=options["confidence"],
    ).assign(promptset=params.promptset)
    write_table(ceiling, out.table, snakemake)
    pooled = select_rows(pd.read_csv(inp.pooled), "pooled layer stability", promptset=params.promptset)
    plot_noise_ceiling(ceiling, pooled, out.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "noise_ceiling_tables", snakemake.log[0], label=snakemake.wildcards.arch)
