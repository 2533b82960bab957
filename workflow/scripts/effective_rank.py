"""Rule effective_rank: every refit's cache (hook_z) + pair_stability.csv + head_stability.csv ->
tables/effective_rank.csv (PR per refit, positions, layer, head), effective_rank_matched.csv (anchor head's PR
beside its best match's), effective_rank_correlation.csv (per layer: mean PR, r with stability, r of anchor
and match PR, refit-resampled intervals) and figures/effective_rank_stability.png (docs/beyond_the_paper.md)."""

import logging

import pandas as pd

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.plots.effective_rank import plot_rank_vs_stability
from headstab.sections.effective_rank import effective_rank_table, matched_rank_table, rank_correlation_table
from headstab.table_files import write_figure_records, write_table
from headstab.table_rows import select_rows


def main():
    inp, out, params = snakemake.input, snakemake.output, snakemake.params
    frames = []
    for seed, path in zip(params.seeds, inp.caches, strict=True):
        with open_cache(path) as cache:
            prepend_bos = bool(cache.attrs["prepend_bos"])
            hook_z, lengths = cache.hook_z(params.promptset), cache.lengths(params.promptset)
        frames.append(effective_rank_table(hook_z, lengths, seed, prepend_bos, params.include_bos))
    pr = pd.concat(frames, ignore_index=True)
    write_table(pr, out.table, snakemake)
    chosen = {"promptset": params.promptset, "scope": "same_layer"}
    pairs = select_rows(pd.read_csv(inp.pair_stability), "pair stability", **chosen)
    heads = select_rows(pd.read_csv(inp.head_stability), "head stability", **chosen)
    matched = matched_rank_table(pr, pairs)
    write_table(matched, out.matched, snakemake)
    options = params.statistics
    correlations = rank_correlation_table(
        pr, heads, matched, options["n_boot"], options["seed"], options["confidence"]
    ).assign(promptset=params.promptset, include_bos=params.include_bos)
    write_table(correlations, out.correlation, snakemake)
    logging.info("effective rank per layer:\n%s", correlations.round(3).to_string())
    plot_rank_vs_stability(pr, heads, out.figure, snakemake.wildcards.arch)
    write_figure_records(snakemake)


run_job(main, "effective_rank", snakemake.log[0])
