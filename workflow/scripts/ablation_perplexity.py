"""Rule ablation_perplexity: the anchors' final.pt and caches -> tables/ablation_perplexity.csv (seed, layer,
head, ppl_ablated, ppl_baseline; paper §4.8). The prompts' tokens come from the caches."""

import pandas as pd
import torch

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import load_trained_model, resolve_device
from headstab.sections.ablation import ablation_perplexity_table
from headstab.table_files import write_table


def main():
    params, inp = snakemake.params, snakemake.input
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    tables = []
    for seed, weights, cache_path in zip(params.anchor_seeds, inp.weights, inp.caches, strict=True):
        # Checked against its meta.json's sha256; processed as the caches were (analysis.weight_processing).
        model = load_trained_model(
            spec, weights, resolve_device(params.device), weight_processing=params.weight_processing
        )
        with open_cache(cache_path) as cache:
            tokens, lengths = cache.tokens(params.promptset), cache.lengths(params.promptset)
        tables.append(ablation_perplexity_table(model, tokens, lengths, params.batch_size, seed))
    write_table(pd.concat(tables, ignore_index=True), snakemake.output.table, snakemake)


run_job(main, "ablation_perplexity", snakemake.log[0])
