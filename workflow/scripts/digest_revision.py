"""Rule digest_revision: one audited revision of a family's seed (hub or local directory) -> its weights digest."""

from pathlib import Path

from headstab.joblog import run_job
from headstab.plan.hub_families import source_from_dict
from headstab.plan.spec import spec_from_dict
from headstab.refits.audit_inputs import digest_model
from headstab.refits.digest_files import save_digest


def main():
    wildcards = snakemake.wildcards
    spec = spec_from_dict({**snakemake.params.spec, "seeds": [int(wildcards.seed)]})
    model = source_from_dict(snakemake.params.source).model(wildcards.seed).at(wildcards.revision)
    out = Path(snakemake.output.digest)
    out.parent.mkdir(parents=True, exist_ok=True)
    where = f"model {model.identity} (seed {wildcards.seed} of '{wildcards.arch}')"
    save_digest(digest_model(model, spec, where, out.parent), out, model.identity)


run_job(
    main,
    "digest_revision",
    snakemake.log[0],
    label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed} at {snakemake.wildcards.revision}",
)
