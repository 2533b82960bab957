"""Rules head_type_scores and head_type_scores_step0: every refit's weights + the tokenizer -> tables/head_type_scores.csv
(or head_type_scores_step0.csv): the probe set's previous-token, duplicate-token, induction and BOS scores and row
entropy of every head of every refit (docs/beyond_the_paper.md)."""

import logging

import pandas as pd
import torch

from headstab.head_types import probe_scores, probe_set, score_table
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import load_trained_model, resolve_device
from headstab.refits.tokenizer import load_tokenizer


def main():
    params = snakemake.params
    spec = spec_from_dict({**params.spec, "seeds": params.seeds})
    device = resolve_device(params.device)
    torch.set_num_threads(snakemake.threads)
    tokenizer = load_tokenizer(params.tokenizer_dir)
    options = params.probe
    # The tokens the model was trained on: the tokenizer's (the model may have spare rows), specials left out.
    vocab_size = min(len(tokenizer), spec.d_vocab)
    probe = probe_set(
        vocab_size,
        options["seed"],
        options["n_sequences"],
        options["length"],
        bos_token=tokenizer.bos_token_id if params.prepend_bos else None,
        exclude=tokenizer.all_special_ids,
    )
    logging.info("probe set: %s sequences x %s tokens from %d vocabulary ids", *probe.tokens.shape, vocab_size)
    tables = []
    for seed, weights in zip(params.seeds, snakemake.input.weights, strict=True):
        model = load_trained_model(
            spec, weights, device=device, tokenizer=tokenizer, weight_processing=params.weight_processing
        )
        tables.append(score_table(probe_scores(model, probe, options["batch_size"]), seed))
        logging.info("refit %s: scored %d heads", seed, len(tables[-1]))
    pd.concat(tables, ignore_index=True).to_csv(snakemake.output[0], index=False)


run_job(main, snakemake.rule, snakemake.log[0], label=snakemake.wildcards.arch)
