"""Rule reuse_paper_refit: a seed grid's refit s-s as a copy of its twin paper architecture's refit s
(planning.paper_twins: identical settings, so identical weights), its meta.json naming the refit it copies."""

import json
import logging
import shutil

from headstab.fileio import write_json_atomic
from headstab.joblog import run_job
from headstab.plan.seed_design import refit_name, refit_seeds


def main():
    source, out = snakemake.input, snakemake.output
    shutil.copyfile(source.weights, out.weights)
    shutil.copyfile(source.train_log, out.train_log)
    with open(source.meta) as handle:
        meta = json.load(handle)
    # The copy is the grid's refit: it carries the grid's name and seeds, as a grid-trained refit's meta.json does.
    init_seed, data_seed = refit_seeds(snakemake.wildcards.seed)
    meta["reused_paper_refit"] = {
        "architecture": snakemake.params.twin,
        "seed": meta["seed"],
        "weights": str(source.weights),
        "why": "same settings, init seed and data seed as this grid refit (headstab.plan.jobs.paper_twins)",
    }
    meta.update(seed=refit_name(snakemake.wildcards.seed), init_seed=init_seed, data_seed=data_seed)
    write_json_atomic(out.meta, meta)
    logging.info("copied %s as %s", source.weights, out.weights)


run_job(main, "reuse_paper_refit", snakemake.log[0])
