"""Rule noise_ceiling_scores: every refit's weights + the tokenizer -> tables/noise_ceiling_scores.csv: the head-type
scores of every head on each of two disjoint halves of the probe set (column probe_half: first, second), the
within-refit reliability that the noise ceiling divides by (docs/beyond_the_paper.md)."""

import logging

import pandas as pd
import torch

from headstab.head_types import probe_scores, score_table, tokenizer_probe_set
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.refits.models import load_trained_model, resolve_device
from headstab.refits.tokenizer import load_tokenizer
from headstab.table_files import write_table


def main():
    params = snakemake.params
    spec = spec_from_dict({**params.spec, "seeds": params.seeds})
    torch.set_num_threads(snakemake.threads)
    tokenizer = load_tokenizer(params.tokenizer_dir)
    probe = tokenizer_probe_set(tokenizer, spec.d_vocab, params.probe, params.prepend_bos)
    half = probe.tokens.shape[0] // 2
    halves = {"first": probe.rows(slice(0, half)), "second": probe.rows(slice(half, 2 * half))}
    logging.info("probe halves: %d sequences each x %d tokens", half, probe.tokens.shape[1])
    options = {"device": resolve_device(params.device), "tokenizer": tokenizer}
    tables = []
    for seed, path in zip(params.seeds, snakemake.input.weights, strict=True):
        model = load_trained_model(spec, path, weight_processing=params.weight_processing, **options)
        for name, part in halves.items():
            scores = probe_scores(model, part, params.probe["batch_size"])
            tables.append(score_table(scores, seed).assign(probe_half=name))
        logging.info("refit %s: scored %d heads on both halves", seed, len(tables[-1]))
    write_table(pd.concat(tables, ignore_index=True), snakemake.output[0], snakemake)


run_job(main, snakemake.rule, snakemake.log[0], label=snakemake.wildcards.arch)
