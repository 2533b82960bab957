"""Rule train_tokenizer: byte-level BPE (or a word-level tokenizer) on a corpus's text -> tokenizer directory + meta.json."""

import logging
import time
from pathlib import Path

from tqdm import tqdm

from headstab.data.sources import iter_documents
from headstab.fileio import sha256_file
from headstab.joblog import run_job
from headstab.refits.tokenizer import train_bpe_tokenizer, train_word_tokenizer, write_tokenizer_meta


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
    model = entry.get("model", "bpe")
    train = train_word_tokenizer if model == "words" else train_bpe_tokenizer
    train(texts, entry["vocab_size"], snakemake.params.out_dir)
    origin = {"source": "train", "corpus": corpus_name, "vocab_size": entry["vocab_size"]}
    if model != "bpe":  # a BPE's record stays as it was, so existing runs' tokenizers stay current
        origin["model"] = model
    if corpus.get("path") and Path(corpus["path"]).is_file():
        origin["corpus_file_sha256"] = sha256_file(corpus["path"])
    meta = write_tokenizer_meta(snakemake.params.out_dir, origin)
    logging.info(
        "tokenizer %s: %d ids, EOS id %s, in %.1f s",
        name,
        meta["vocab_size"],
        meta["eos_token_id"],
        time.perf_counter() - start,
    )


run_job(main, "train_tokenizer", snakemake.log[0])
