"""Rule fetch_tokenizer: AutoTokenizer.from_pretrained(hub id) -> tokenizer directory + meta.json."""

import logging

from headstab.joblog import run_job
from headstab.refits.tokenizer import fetch_hub_tokenizer, write_tokenizer_meta


def main():
    hub_id, out_dir = snakemake.params.hub_id, snakemake.params.out_dir
    fetch_hub_tokenizer(hub_id, out_dir)
    meta = write_tokenizer_meta(out_dir, {"source": "hub", "name": hub_id})
    logging.info("tokenizer %s: %d ids, EOS id %s", hub_id, meta["vocab_size"], meta["eos_token_id"])


run_job(main, "fetch_tokenizer", snakemake.log[0])
