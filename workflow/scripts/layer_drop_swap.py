"""Rule layer_drop_swap: every refit's final.pt + held-out shards -> tables/layer_drop_swap.csv (seed, condition,
layer, top1_agreement, ppl, ppl_intact, delta_ppl, kl_divergence = mean KL(intact || condition) per prediction,
n_predictions; docs/beyond_the_paper.md)."""

import logging

import pandas as pd
import torch

from headstab.data.shards import load_shards
from headstab.evaluation import check_heldout_vocabulary, heldout_windows
from headstab.joblog import run_job
from headstab.layer_surgery import drop_swap_counts
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import load_trained_model, resolve_device
from headstab.sections.layer_robustness import drop_swap_table
from headstab.table_files import write_table


def main():
    params, inp = snakemake.params, snakemake.input
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    windows = heldout_windows(load_shards(inp.heldout), params.heldout_tokens, spec.seq_len)
    check_heldout_vocabulary(windows, spec.d_vocab, list(inp.heldout))
    logging.info("drop/swap: %d windows of %d tokens", len(windows), spec.seq_len)
    tables = []
    for seed, path in zip(spec.seeds, inp.weights, strict=True):
        # Checked against its meta.json's sha256; processed as the caches were (analysis.weight_processing).
        model = load_trained_model(
            spec, path, resolve_device(params.device), weight_processing=params.weight_processing
        )
        tables.append(drop_swap_table(drop_swap_counts(model, windows, params.batch_size), seed))
        logging.info("seed %s:\n%s", seed, tables[-1].round(4).to_string())
    write_table(pd.concat(tables, ignore_index=True), snakemake.output.table, snakemake)


run_job(main, "layer_drop_swap", snakemake.log[0])
