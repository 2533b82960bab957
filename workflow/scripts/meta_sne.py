"""Rule meta_sne: caches of every refit of every architecture -> summary/tables/meta_sne.csv (one row per
(architecture, seed, layer, head) with its t-SNE coordinates) and summary/figures/meta_sne.png
(paper §4.9, Fig. 11). Optimizer and attention-only come from the specs (params.architectures)."""

import logging

from headstab.joblog import run_job
from headstab.plots.meta_sne import plot_meta_sne
from headstab.sections.meta_sne import describe_refits, meta_sne_table


def main():
    params = snakemake.params
    paths = {(arch, int(seed)): path for (arch, seed), path in zip(params.refits, snakemake.input.caches, strict=True)}
    descriptions = describe_refits(paths, params.promptset)
    table = meta_sne_table(
        descriptions,
        params.architectures,
        perplexity=params.perplexity,
        n_threads=snakemake.threads,
        embedding=params.embedding,
    )
    logging.info("t-SNE of %d heads from %d refits", len(table), len(descriptions))
    table.to_csv(snakemake.output.table, index=False)
    plot_meta_sne(table, snakemake.output.figure)


run_job(main, "meta_sne", snakemake.log[0])
