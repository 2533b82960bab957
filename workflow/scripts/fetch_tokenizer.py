"""Rule fetch_tokenizer: AutoTokenizer.from_pretrained(hub id) -> tokenizer directory + meta.json."""

import logging
import os
import sys

from headstab.tokenizer import fetch_hub_tokenizer, write_tokenizer_meta


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
    hub_id, out_dir = snakemake.params.hub_id, snakemake.params.out_dir
    fetch_hub_tokenizer(hub_id, out_dir)
    meta = write_tokenizer_meta(out_dir, {"source": "hub", "name": hub_id})
    logging.info("tokenizer %s: %d ids, EOS id %s", hub_id, meta["vocab_size"], meta["eos_token_id"])


run(main, "fetch_tokenizer")
