"""Rule train: one refit (architecture, seed) -> final.pt, train_log.csv, meta.json (paper §3.1)."""

from pathlib import Path

from headstab.config import spec_from_dict
from headstab.joblog import run_job
from headstab.training import train_refit


def main():
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [int(snakemake.wildcards.seed)]})
    train_refit(
        spec,
        seed=int(snakemake.wildcards.seed),
        shard_paths=list(snakemake.input.shards),
        out_dir=Path(snakemake.output.weights).parent,
        corpus_meta_path=snakemake.input.corpus_meta,
        tokenizer_dir=snakemake.params.tokenizer_dir,
        device=snakemake.params.device,
        threads=snakemake.threads,
    )


# Appending: a resumed job keeps the history of the run it continues.
run_job(
    main, "train", snakemake.log[0], append=True, label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed}"
)
