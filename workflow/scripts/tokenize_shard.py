"""Rule tokenize_shard: shard i of a corpus -> shard_{i:03d}.npy (token stream) + shard_{i:03d}.json."""

import logging
import os
import sys
import time

from tqdm import tqdm

from headstab.corpus import build_shard, shard_token_quota
from headstab.tokenizer import load_tokenizer, tokenizer_identity

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
    corpus, shard_index = snakemake.params.corpus, snakemake.params.shard_index
    corpus_name = snakemake.wildcards.corpus
    tokenizer = load_tokenizer(snakemake.params.tokenizer_dir)
    identity = tokenizer_identity(snakemake.params.tokenizer_dir)
    quota = shard_token_quota(corpus.get("n_tokens"), corpus["n_shards"], shard_index)
    logging.info("corpus %s shard %d/%d: source %s, tokenizer %s, token quota %s", corpus_name, shard_index,
                 corpus["n_shards"], corpus["source"], snakemake.params.tokenizer_dir, quota)
    start = time.perf_counter()
    with tqdm(total=quota, unit="tok", unit_scale=True, mininterval=10) as progress:
        record = build_shard(corpus, corpus_name, shard_index, snakemake.output.tokens, tokenizer, identity, progress)
    seconds = time.perf_counter() - start
    logging.info("wrote %d tokens (%d documents, %s) to %s in %.1f s (%.0f tokens/s)", record["n_tokens"],
                 record["n_documents"], record["dtype"], snakemake.output.tokens, seconds, record["n_tokens"] / max(seconds, 1e-9))


run(main, "tokenize_shard")
