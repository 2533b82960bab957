"""Rule reuse_paper_refit: a seed grid's refit s-s as a copy of its twin paper architecture's refit s
(planning.paper_twins: identical settings, so identical weights), its meta.json naming the refit it copies."""

import json
import logging
import shutil

from headstab.joblog import run_job


def main():
    source, out = snakemake.input, snakemake.output
    shutil.copyfile(source.weights, out.weights)
    shutil.copyfile(source.train_log, out.train_log)
    with open(source.meta) as handle:
        meta = json.load(handle)
    meta["reused_paper_refit"] = {
        "architecture": snakemake.params.twin,
        "weights": str(source.weights),
        "why": "same settings, init seed and data seed as this grid refit (headstab.planning.paper_twins)",
    }
    with open(out.meta, "w") as handle:
        json.dump(meta, handle, indent=2, sort_keys=True)
    logging.info("copied %s as %s", source.weights, out.weights)


run_job(main, "reuse_paper_refit", snakemake.log[0])
