"""Rule meta_sne: caches of every refit of every architecture -> summary/tables/meta_sne.csv (one row per
(architecture, seed, layer, head) with its t-SNE coordinates) and summary/figures/meta_sne.png
(paper §4.9, Fig. 11)."""

import logging

import numpy as np
from tqdm import tqdm

from headstab.caches import open_cache
from headstab.joblog import run_job
from headstab.meta_sne import head_descriptions, meta_sne_table
from headstab.plots.analyses import plot_meta_sne


def refit_descriptions(path, promptset):
    """[layer, head, n_prompt_pairs]: one layer of hook_z read at a time."""
    with open_cache(path) as cache:
        lengths = cache.lengths(promptset)
        return np.stack([head_descriptions(cache.head_out(promptset, layer=layer)[None], lengths)[0]
                         for layer in range(cache.n_layers)])


def main():
    params = snakemake.params
    descriptions = {}
    for (arch, seed), path in tqdm(list(zip(params.refits, snakemake.input.caches, strict=True)), desc="describe heads"):
        descriptions[(arch, int(seed))] = refit_descriptions(path, params.promptset)
    table = meta_sne_table(descriptions, perplexity=params.perplexity, seed=params.seed,
                           optimizers=params.optimizers, n_threads=snakemake.threads, embedding=params.embedding)
    logging.info("t-SNE of %d heads from %d refits", len(table), len(descriptions))
    table.to_csv(snakemake.output.table, index=False)
    plot_meta_sne(table, snakemake.output.figure)


run_job(main, "meta_sne", snakemake.log[0])
