"""Rule weight_norms: every refit's final.pt -> tables/weight_norms.csv (seed, layer, matrix,
frobenius_norm; paper §4.4.1, Table B.5)."""

import logging

import torch

from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.sections.weight_norms import refit_weight_norms


def main():
    params = snakemake.params
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    weights = dict(zip(spec.seeds, snakemake.input.weights, strict=True))
    table = refit_weight_norms(spec, weights, params.attention_norm, params.weight_processing)
    table.to_csv(snakemake.output.table, index=False)
    logging.info("weight norms of %d refits, %d layers", len(weights), spec.n_layers)


run_job(main, "weight_norms", snakemake.log[0])
