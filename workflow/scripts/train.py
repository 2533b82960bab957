"""Rule train: one block of refits of one architecture, trained together -> each refit's final.pt, train_log.csv
and meta.json in its training/ directory, then the block's record (paper §3.1). A seed-grid refit is named
"{init}-{data}" (headstab.plan.seed_design): init seed for the weights, data seed for the order."""

from pathlib import Path

from headstab.fileio import write_json_atomic
from headstab.joblog import run_job
from headstab.plan.spec import spec_from_dict
from headstab.training import RefitTarget, TrainingData, TrainingOptions, train_refits


def main():
    refits = list(snakemake.params.refits)
    spec = spec_from_dict({**snakemake.params.spec, "seeds": refits})
    training = snakemake.config["training"]  # attention and compile: how fast, not what (not params)
    options = TrainingOptions(
        precision=snakemake.params.precision,
        attention=training["attention"],
        compile=training["compile"],
        device=snakemake.params.device,
        threads=snakemake.threads,
    )
    data = TrainingData.of(snakemake.input.shards, snakemake.input.corpus_meta, snakemake.params.tokenizer_dir)
    targets = [RefitTarget(name, Path(path)) for name, path in zip(refits, snakemake.params.training_dirs)]
    metas = train_refits(spec, targets, data, options)
    # Only what the weights determine: a rerun that ends with the same weights writes the same record.
    record = {
        "architecture": snakemake.wildcards.arch,
        "block": snakemake.wildcards.block,
        "refits": [
            {
                "seed": meta["seed"],
                "steps": meta["steps"],
                "final_loss": meta["final_loss"],
                "final_weights_sha256": meta["final_weights_sha256"],
            }
            for meta in metas
        ],
    }
    write_json_atomic(snakemake.output.record, record)


# Appending: a resumed job keeps the history of the run it continues. snakemake.rule: also train_seed_grid.
run_job(
    main,
    snakemake.rule,
    snakemake.log[0],
    append=True,
    label=f"{snakemake.wildcards.arch} {snakemake.wildcards.block}",
)
