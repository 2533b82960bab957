"""Rule train: one refit (architecture, seed) -> final.pt, train_log.csv, meta.json (paper §3.1). A seed-grid
refit's wildcard is "{init}-{data}" (headstab.plan.seed_design): init seed for the weights, data seed for the order;
an architecture with data_order shared orders every refit's windows with one data seed."""

from pathlib import Path

from headstab.joblog import run_job
from headstab.plan.seed_design import refit_name, training_seeds
from headstab.plan.spec import spec_from_dict
from headstab.training import train_refit


def main():
    name = refit_name(snakemake.wildcards.seed)
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [name]})
    init_seed, data_seed = training_seeds(name, spec.data_order)
    train_refit(
        spec,
        seed=init_seed,
        shard_paths=list(snakemake.input.shards),
        out_dir=Path(snakemake.output.weights).parent,
        corpus_meta_path=snakemake.input.corpus_meta,
        tokenizer_dir=snakemake.params.tokenizer_dir,
        device=snakemake.params.device,
        threads=snakemake.threads,
        data_seed=data_seed,
        name=name,
    )


# Appending: a resumed job keeps the history of the run it continues. snakemake.rule: also train_seed_grid.
run_job(
    main,
    snakemake.rule,
    snakemake.log[0],
    append=True,
    label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed}",
)
