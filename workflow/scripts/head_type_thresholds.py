"""Rule head_type_thresholds: the tokenizer (+ head_type_scores_held_out.csv, architectures trained here) ->
tables/head_type_thresholds.csv: per layer and score, the threshold a head must exceed to have a type, calibrated on
the held-out initialisations or fixed, beside the score of even attention on the probe set (docs/beyond_the_paper.md)."""

import logging

import pandas as pd

from headstab.head_type_thresholds import calibrated_thresholds, fixed_thresholds
from headstab.head_types import even_attention_scores, tokenizer_probe_set
from headstab.joblog import run_job
from headstab.refits.tokenizer import load_tokenizer
from headstab.table_files import write_table


def main():
    params = snakemake.params
    probe = tokenizer_probe_set(load_tokenizer(params.tokenizer_dir), params.d_vocab, params.probe, params.prepend_bos)
    even = even_attention_scores(probe)
    if snakemake.input.held_out:
        held_out = pd.read_csv(snakemake.input.held_out[0])
        thresholds = calibrated_thresholds(held_out, params.quantile, params.floors, even)
    else:
        thresholds = fixed_thresholds(params.fixed_thresholds, params.n_layers, even)
    logging.info("thresholds:\n%s", thresholds.to_string())
    write_table(thresholds, snakemake.output[0], snakemake)


run_job(main, "head_type_thresholds", snakemake.log[0], label=snakemake.wildcards.arch)
