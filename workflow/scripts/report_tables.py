"""Rule report_tables: one architecture's CSV tables -> one sortable HTML page each under
<category>/<subcategory>/<name>.html (headstab.report_pages)."""

import logging

from headstab.joblog import run_job
from headstab.report_pages import write_table_pages


def main():
    pages = write_table_pages(list(snakemake.input.tables), snakemake.output[0], snakemake.params.max_rows)
    logging.info("%d tables -> %d pages under %s", len(snakemake.input.tables), len(pages), snakemake.output[0])


run_job(main, "report_tables", snakemake.log[0])
