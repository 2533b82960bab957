"""Rule init_weights: refit {seed} of {arch} at step 0 (the model train starts from) -> snapshots/step0/.../final.pt, meta.json."""

from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.training.snapshots import write_init_weights


def main():
    seed = int(snakemake.wildcards.seed)
    write_init_weights(spec_from_dict({**snakemake.params.spec, "seeds": [seed]}), seed, snakemake.output.weights)


run_job(main, "init_weights", snakemake.log[0], label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed}")
