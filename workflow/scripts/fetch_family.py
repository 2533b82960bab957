"""Rule fetch_family: one seed of a hub family (hub or local directory) -> checkpoints/seed{seed}/final.pt + meta.json."""

from pathlib import Path

from headstab.joblog import run_job
from headstab.plan.hub_families import source_from_dict
from headstab.plan.spec import spec_from_dict
from headstab.provenance.records import environment_record, package_versions
from headstab.refits.hub_models import fetch_family_refit


def main():
    seed = int(snakemake.wildcards.seed)
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [seed]})
    source = source_from_dict(snakemake.params.source)
    environment = {**environment_record(), "packages": package_versions()}
    out_dir = Path(snakemake.output.weights).parent
    fetch_family_refit(source, spec, seed, snakemake.params.tokenizer_dir, out_dir, environment)


run_job(
    main,
    "fetch_family",
    snakemake.log[0],
    label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed}",
)
