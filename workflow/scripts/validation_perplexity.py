"""Rule validation_perplexity: every refit's final.pt + held-out shards -> tables/validation_perplexity.csv
(seed, perplexity, n_tokens; paper §4.5, §B.7 figures)."""

import logging

import torch

from headstab.data.shards import load_shards
from headstab.evaluation import check_heldout_vocabulary, heldout_windows
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import resolve_device
from headstab.sections.optimizers import validation_perplexity_table
from headstab.table_files import write_table


def main():
    params, inp = snakemake.params, snakemake.input
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    windows = heldout_windows(load_shards(inp.heldout), params.heldout_tokens, spec.seq_len)
    check_heldout_vocabulary(windows, spec.d_vocab, list(inp.heldout))
    logging.info("validation: %d windows of %d tokens", len(windows), spec.seq_len)
    weights = dict(zip(spec.seeds, inp.weights, strict=True))
    table = validation_perplexity_table(
        spec, weights, windows, resolve_device(params.device), params.batch_size, params.weight_processing
    )
    write_table(table, snakemake.output.table, snakemake)


run_job(main, "validation_perplexity", snakemake.log[0])
