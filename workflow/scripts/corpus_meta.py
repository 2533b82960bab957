"""Rule corpus_meta: shard records -> the corpus's meta.json (tokenizer identity, token counts, sha256), and the
job's environment.json beside it."""

import logging
from pathlib import Path

from headstab.data.shards import aggregate_shard_records
from headstab.fileio import read_json, write_json_atomic
from headstab.joblog import run_job
from headstab.provenance.records import ENVIRONMENT_FILE, environment_record


def main():
    records = [read_json(path, "shard record") for path in snakemake.input.records]
    meta = aggregate_shard_records(records, snakemake.wildcards.corpus)
    # Content only in meta.json, which train reads: the same shards give the same bytes whenever rebuilt.
    write_json_atomic(Path(snakemake.output.meta).with_name(ENVIRONMENT_FILE), environment_record())
    write_json_atomic(snakemake.output.meta, meta)
    logging.info("corpus %s: %d tokens in %d shards", meta["corpus"], meta["n_tokens"], meta["n_shards"])


run_job(main, "corpus_meta", snakemake.log[0])
