"""Rule synthetic_text: seeded English-like documents -> text.jsonl (one {"text": ...} per line)."""

import logging
import os
import sys
import time

from tqdm import tqdm

from headstab.corpus import generate_synthetic_documents, write_jsonl

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
    seed, n_documents = snakemake.params.seed, snakemake.params.n_documents
    logging.info("corpus %s: generating %d documents with seed %d", snakemake.wildcards.corpus, n_documents, seed)
    start = time.perf_counter()
    documents = tqdm(generate_synthetic_documents(seed, n_documents), total=n_documents, unit="doc", mininterval=5)
    count = write_jsonl(documents, snakemake.output.text)
    logging.info("wrote %d documents to %s in %.1f s", count, snakemake.output.text, time.perf_counter() - start)


run(main, "synthetic_text")
