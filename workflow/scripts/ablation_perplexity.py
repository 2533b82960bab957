"""Rule ablation_perplexity: the anchor's final.pt and cache -> tables/ablation_perplexity.csv (seed, layer,
head, ppl_ablated, ppl_baseline; paper §4.8). The prompts' tokens come from the cache."""

import torch

from headstab.activations.reader import open_cache
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import load_trained_model, resolve_device
from headstab.sections.ablation import ablation_perplexity_table


def main():
    params, inp = snakemake.params, snakemake.input
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    # Checked against its meta.json's sha256; processed as the caches were (analysis.weight_processing).
    model = load_trained_model(
        spec, inp.weights, resolve_device(params.device), weight_processing=params.weight_processing
    )
    with open_cache(inp.cache) as cache:
        tokens, lengths = cache.tokens(params.promptset), cache.lengths(params.promptset)
    table = ablation_perplexity_table(model, tokens, lengths, params.batch_size, params.anchor_seed)
    table.to_csv(snakemake.output.table, index=False)


run_job(main, "ablation_perplexity", snakemake.log[0])
