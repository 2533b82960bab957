"""Rule report_configuration: the resolved run configuration -> summary/configuration.yaml (for the report)."""

import yaml

from headstab.joblog import run_job


def main():
    with open(snakemake.output[0], "w") as handle:
        yaml.safe_dump(dict(snakemake.params.config), handle, sort_keys=False, default_flow_style=False)


run_job(main, "report_configuration", snakemake.log[0])
