"""Rule corpus_meta: shard records -> the corpus's meta.json (tokenizer identity, token counts, sha256)."""

import logging
import os
import sys

from headstab.corpus import aggregate_shard_records
from headstab.provenance import environment_record, read_json, write_json_atomic


def log_to_file(path):
    """Send stderr (logging, tqdm, library warnings) to the rule's log file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run(main, rule):
    """Run main(); on failure, the traceback goes to the log and a one-line reason to the console."""
    log_to_file(snakemake.log[0])
    try:
        main()
    except Exception as error:
        logging.exception("rule %s failed", rule)
        print(f"Error in rule {rule}: {error}\n(details: {snakemake.log[0]})", flush=True)
        raise SystemExit(1) from None


def main():
    records = [read_json(path, "shard record") for path in snakemake.input.records]
    meta = aggregate_shard_records(records, snakemake.wildcards.corpus)
    meta["environment"] = environment_record()
    write_json_atomic(snakemake.output.meta, meta)
    logging.info("corpus %s: %d tokens in %d shards", meta["corpus"], meta["n_tokens"], meta["n_shards"])


run(main, "corpus_meta")
