"""Rule snapshot_weights: the weights train kept at step {step} -> snapshots/step{step}/weights/seed{seed}/final.pt, meta.json."""

from headstab.joblog import run_job
from headstab.training.snapshots import publish_snapshot


def main():
    arch, seed, step = snakemake.wildcards.arch, snakemake.wildcards.seed, int(snakemake.wildcards.step)
    publish_snapshot(snakemake.params.training, step, snakemake.output.weights, arch, seed, snakemake.input.weights)


run_job(
    main,
    "snapshot_weights",
    snakemake.log[0],
    label=f"{snakemake.wildcards.arch} step {snakemake.wildcards.step} seed {snakemake.wildcards.seed}",
)
