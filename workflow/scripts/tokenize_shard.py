"""Rule tokenize_shard: shard i of a corpus -> shard_{i:03d}.npy (token stream) + shard_{i:03d}.json."""

import logging
import time

from tqdm import tqdm

from headstab.data.shards import build_shard, shard_token_quota
from headstab.joblog import run_job
from headstab.refits.tokenizer import load_tokenizer, tokenizer_identity


def main():
    corpus, shard_index = snakemake.params.corpus, snakemake.params.shard_index
    corpus_name = snakemake.wildcards.corpus
    tokenizer = load_tokenizer(snakemake.params.tokenizer_dir)
    identity = tokenizer_identity(snakemake.params.tokenizer_dir)
    quota = shard_token_quota(corpus.get("n_tokens"), corpus["n_shards"], shard_index)
    logging.info(
        "corpus %s shard %d/%d: source %s, tokenizer %s, token quota %s",
        corpus_name,
        shard_index,
        corpus["n_shards"],
        corpus["source"],
        snakemake.params.tokenizer_dir,
        quota,
    )
    start = time.perf_counter()
    with tqdm(total=quota, unit="tok", unit_scale=True, mininterval=10) as progress:
        record = build_shard(corpus, corpus_name, shard_index, snakemake.output.tokens, tokenizer, identity, progress)
    seconds = time.perf_counter() - start
    logging.info(
        "wrote %d tokens (%d documents, %s) to %s in %.1f s (%.0f tokens/s)",
        record["n_tokens"],
        record["n_documents"],
        record["dtype"],
        snakemake.output.tokens,
        seconds,
        record["n_tokens"] / max(seconds, 1e-9),
    )


run_job(main, "tokenize_shard", snakemake.log[0])
