"""Rule fetch_published: one published refit (hub or local copy) -> checkpoints/seed{seed}/final.pt + meta.json."""

import tempfile
from pathlib import Path

from headstab.joblog import run_job
from headstab.plan.sources import PUBLISHED, CheckpointSource
from headstab.plan.spec import spec_from_dict
from headstab.provenance.records import environment_record, package_versions
from headstab.refits.published import convert_published_refit, download_published_refit


def main():
    seed = int(snakemake.wildcards.seed)
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [seed]})
    source = CheckpointSource(**snakemake.params.source)
    out_dir = Path(snakemake.output.weights).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    environment = {**environment_record(), "packages": package_versions()}
    # A hub download lands beside the output (not in the hub cache) and is deleted once converted.
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".download_") as download_dir:
        original = (
            download_published_refit(source, spec, seed, Path(download_dir))
            if source.kind == PUBLISHED
            else Path(snakemake.input[0])
        )
        convert_published_refit(original, spec, seed, source, out_dir, environment)


run_job(
    main,
    "fetch_published",
    snakemake.log[0],
    label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed}",
)
