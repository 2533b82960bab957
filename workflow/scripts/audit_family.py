"""Rule audit_family: a family's digests (and its peers') -> the audit record, or a failure naming every finding."""

import logging

from headstab.fileio import write_json_atomic
from headstab.joblog import run_job
from headstab.plan.family_audit import settings_from_dict
from headstab.refits.audit import AuditRefused, audit_family, audit_record, format_report, refusal_message
from headstab.refits.digest_files import checkpoints_from_files


def main():
    family = snakemake.wildcards.arch
    files = {name: [tuple(entry) for entry in entries] for name, entries in snakemake.params.checkpoints.items()}
    peers = {name: checkpoints_from_files(entries) for name, entries in files.items() if name != family}
    settings = settings_from_dict(snakemake.params.settings)
    result = audit_family(family, settings, checkpoints_from_files(files[family]), peers)
    logging.info("%s", format_report(result))
    if not result.passed:
        raise AuditRefused(refusal_message(result))
    write_json_atomic(snakemake.output.record, audit_record(result))


run_job(main, "audit_family", snakemake.log[0], label=snakemake.wildcards.arch)
