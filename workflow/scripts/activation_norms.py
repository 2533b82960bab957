"""Rule activation_norms: every refit's final.pt and cache -> tables/activation_norms.csv (seed, layer,
activation, mean_norm for attn_out and resid_mid; paper §4.5, Fig. 35)."""

import logging

import torch

from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.sections.optimizers import activation_norm_table
from headstab.table_files import write_table


def main():
    params, inp = snakemake.params, snakemake.input
    spec = spec_from_dict(params.spec)
    torch.set_num_threads(snakemake.threads)
    refits = dict(zip(spec.seeds, zip(inp.weights, inp.caches, strict=True), strict=True))
    table = activation_norm_table(spec, refits, params.promptset, params.weight_processing)
    write_table(table, snakemake.output.table, snakemake)
    logging.info("activation norms of %d refits on %s", len(refits), params.promptset)


run_job(main, "activation_norms", snakemake.log[0])
