"""Rule digest_refit: a fetched family refit's final.pt (checked against its meta.json) -> its weights digest."""

from headstab.fileio import read_json
from headstab.joblog import run_job
from headstab.refits.audit_inputs import state_digest
from headstab.refits.digest_files import save_digest
from headstab.refits.models import load_verified_state_dict


def main():
    identity = read_json(snakemake.input.meta)["identity"]
    save_digest(state_digest(load_verified_state_dict(snakemake.input.weights)), snakemake.output.digest, identity)


run_job(main, "digest_refit", snakemake.log[0], label=f"{snakemake.wildcards.arch} seed {snakemake.wildcards.seed}")
