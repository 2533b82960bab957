"""Rule weight_norms: every refit's final.pt -> tables/weight_norms.csv (seed, layer, matrix,
frobenius_norm) and tables/head_weight_norms.csv (seed, layer, head, matrix, frobenius_norm of the
attention matrices) (paper §4.4.1, Table B.5)."""

import logging

import torch

from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.sections.weight_norms import refit_norm_tables
from headstab.table_files import write_table


def main():
    params = snakemake.params
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    weights = dict(zip(spec.seeds, snakemake.input.weights, strict=True))
    layers, heads = refit_norm_tables(spec, weights, params.attention_norm, params.weight_processing)
    write_table(layers, snakemake.output.table, snakemake)
    write_table(heads, snakemake.output.heads, snakemake)
    logging.info("weight norms of %d refits, %d layers", len(weights), spec.n_layers)


run_job(main, "weight_norms", snakemake.log[0])
