"""Rule train_tokenizer: byte-level BPE on a corpus's text -> tokenizer directory + meta.json."""

import logging
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

from headstab.corpus import iter_documents
from headstab.provenance import sha256_file
from headstab.tokenizer import train_bpe_tokenizer, write_tokenizer_meta

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
    entry, corpus = snakemake.params.entry, snakemake.params.corpus
    name, corpus_name = snakemake.wildcards.tokenizer, entry["corpus"]
    if corpus.get("pretokenized", False):
        raise ValueError(
            f"config key 'tokenizers.{name}.corpus': corpus '{corpus_name}' is pre-tokenized and has no text to train a "
            "tokenizer on; name a text corpus"
        )
    start = time.perf_counter()
    texts = tqdm(iter_documents(corpus, 0, 1, corpus_name), unit="doc", mininterval=5)
    tokenizer = train_bpe_tokenizer(texts, entry["vocab_size"], snakemake.params.out_dir)
    origin = {"source": "train", "corpus": corpus_name, "vocab_size": entry["vocab_size"]}
    if corpus.get("path") and Path(corpus["path"]).is_file():
        origin["corpus_file_sha256"] = sha256_file(corpus["path"])
    meta = write_tokenizer_meta(snakemake.params.out_dir, origin)
    logging.info("tokenizer %s: %d ids, EOS id %s, in %.1f s", name, meta["vocab_size"], meta["eos_token_id"],
                 time.perf_counter() - start)


run(main, "train_tokenizer")
