"""Rule residual_cka: caches of one architecture -> tables/residual_cka.csv (promptset, seed_a, seed_b,
layer, cka) and figures/residual_stream.png (paper §4.7, Fig. 9 / B.8), on the residual hook
params.hook (config key analysis.cka_hook)."""

import logging

import numpy as np
import pandas as pd
from tqdm import tqdm

from headstab.caches import CacheError, open_cache
from headstab.cka import pairwise_layer_cka, subsample_tokens, token_activations
from headstab.joblog import run_job
from headstab.plots.analyses import plot_residual_stream


def layer_tokens(caches, promptset, layer, keep, hook):
    """seed -> [1, n_kept, d_model]: real-token activations of residual hook `hook` of one layer, the same
    tokens for every refit."""
    return {seed: token_activations(cache.resid(promptset, hook, layer=layer), cache.lengths(promptset))[keep][None]
            for seed, cache in caches.items()}


def promptset_cka(caches, promptset, params):
    lengths = {seed: cache.lengths(promptset) for seed, cache in caches.items()}
    first = next(iter(caches))
    for seed, cache in caches.items():
        if not np.array_equal(lengths[seed], lengths[first]):
            raise CacheError(f"caches {caches[first].path} and {cache.path} tokenize prompt set '{promptset}' "
                             "differently; CKA needs the same tokens in every refit (rebuild the stale cache)")
    keep = subsample_tokens(int(lengths[first].sum()), params.max_tokens)
    frames = []
    for layer in range(caches[first].n_layers):
        table = pairwise_layer_cka(layer_tokens(caches, promptset, layer, keep, params.hook), kernel=params.kernel,
                                   threshold=params.threshold, debiased=params.debiased)
        frames.append(table.assign(layer=layer))
    logging.info("%s: %d of %d tokens per refit, %s", promptset, len(keep), int(lengths[first].sum()), params.hook)
    return pd.concat(frames, ignore_index=True).assign(promptset=promptset)


def main():
    params = snakemake.params
    caches = {seed: open_cache(path) for seed, path in zip(params.seeds, snakemake.input.caches, strict=True)}
    try:
        tables = [promptset_cka(caches, promptset, params) for promptset in tqdm(params.promptsets, desc="CKA")]
    finally:
        for cache in caches.values():
            cache.close()
    table = pd.concat(tables, ignore_index=True)[["promptset", "seed_a", "seed_b", "layer", "cka"]]
    table.to_csv(snakemake.output.table, index=False)
    kernel = "RBF" if params.kernel == "rbf" else "linear"
    if params.debiased:
        kernel += ", debiased"
    plot_residual_stream(table, pd.read_csv(snakemake.input.layer_stability), snakemake.output.figure,
                         snakemake.wildcards.arch, promptset=params.figure_promptset, kernel=kernel, hook=params.hook,
                         pairs=params.pairs)


run_job(main, "residual_cka", snakemake.log[0])
