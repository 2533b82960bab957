"""Rules head_type_scores, head_type_scores_step0 and head_type_scores_held_out: every refit's weights (or, held out,
the initialisations of params.held_out_seeds, built in memory) + the tokenizer -> tables/head_type_scores.csv (or
_step0.csv, _held_out.csv): the probe set's previous-token, duplicate-token, induction and BOS scores, the row
entropy and the OV circuit's copying score of every head (docs/beyond_the_paper.md)."""

import logging

import pandas as pd
import torch

from headstab.head_types import probe_scores, score_table, tokenizer_probe_set
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import initial_model, load_trained_model, resolve_device
from headstab.refits.tokenizer import load_tokenizer
from headstab.table_files import write_table


def main():
    params = snakemake.params
    seeds = params.held_out_seeds or params.seeds
    spec = spec_from_dict({**params.spec, "seeds": seeds})
    device = resolve_device(params.device)
    torch.set_num_threads(snakemake.threads)
    tokenizer = load_tokenizer(params.tokenizer_dir)
    probe = tokenizer_probe_set(tokenizer, spec.d_vocab, params.probe, params.prepend_bos)
    logging.info(
        "probe set: %s sequences x %s tokens from %d vocabulary ids", *probe.tokens.shape, probe.vocabulary.size
    )
    options = {"device": device, "tokenizer": tokenizer, "weight_processing": params.weight_processing}
    # held out: no weights file, the initialisation rebuilt from the seed
    paths = [None] * len(seeds) if params.held_out_seeds else snakemake.input.weights
    tables = []
    for seed, path in zip(seeds, paths, strict=True):
        model = initial_model(spec, seed, **options) if path is None else load_trained_model(spec, path, **options)
        tables.append(score_table(probe_scores(model, probe, params.probe["batch_size"]), seed))
        logging.info("refit %s: scored %d heads", seed, len(tables[-1]))
    write_table(pd.concat(tables, ignore_index=True), snakemake.output[0], snakemake)


run_job(main, snakemake.rule, snakemake.log[0], label=snakemake.wildcards.arch)
