"""Token shards: documents -> `shard_{i:03d}.npy` + `.json` record, the corpus meta.json, and reading shards back.

A corpus becomes `n_shards` shards, built by independent jobs (shard `i` holds a disjoint part of
the documents, see `headstab.data.sources`):

- `shard_{i:03d}.npy`: 1-D token stream `[token]`, uint16 when the tokenizer has at most 65,536 ids,
  else uint32, loadable with `np.load(path, mmap_mode="r")`. Raw-text documents are tokenized
  without special tokens and each is followed by the tokenizer's EOS token (GPT-2 style, so the
  concatenation of all shards has EOS between every two documents). Pre-tokenized rows (the paper's
  `NeelNanda/c4-code-tokenized-2b`) are copied as they are: their rows already carry separators.
- `shard_{i:03d}.json`: token and document counts, dtype, sha256 of the .npy, tokenizer identity,
  source description.
- `meta.json` (per corpus): the shard records aggregated.

`n_tokens` caps the corpus: shard i keeps `n_tokens // n_shards` tokens, the last shard also the
remainder, so the shards hold exactly `n_tokens` tokens; a source with fewer fails with a message
naming the corpus, the shard and `corpora.<name>.n_tokens`.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from headstab.data import CorpusError
from headstab.data.sources import describe_source, iter_documents
from headstab.fileio import read_json, save_npy_atomic, sha256_file, write_json_atomic


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65,536), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def shard_token_quota(n_tokens: int | None, n_shards: int, shard_index: int) -> int | None:
    """Tokens shard `shard_index` keeps under a corpus cap of `n_tokens` (None: no cap).

    Every shard keeps n_tokens // n_shards, the last one also the remainder, so they sum to n_tokens.
    """
    if n_tokens is None:
        return None
    quota = n_tokens // n_shards
    return quota + (n_tokens % n_shards if shard_index == n_shards - 1 else 0)


def iter_token_chunks(
    documents: Iterable[str | Sequence[int]],
    tokenizer: Any | None,
    eos_id: int | None,
    batch_size: int = 512,
) -> Iterator[tuple[np.ndarray, int]]:
    """(tokens `[token]` int64, number of documents) per batch of documents.

    Text documents are tokenized without special tokens and each followed by `eos_id`; token-id
    lists (pre-tokenized rows) are copied unchanged (`tokenizer` may be None then).
    """
    batch: list[Any] = []

    def flush() -> tuple[np.ndarray, int]:
        if isinstance(batch[0], str):
            if tokenizer is None or eos_id is None:
                raise ValueError("text documents need a tokenizer and an EOS id")
            ids = tokenizer(batch, add_special_tokens=False)["input_ids"]
            pieces = [np.asarray(seq + [eos_id], dtype=np.int64) for seq in ids]
        else:
            pieces = [np.asarray(row, dtype=np.int64).reshape(-1) for row in batch]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64), len(batch)

    for document in documents:
        if batch and isinstance(document, str) != isinstance(batch[0], str):
            raise ValueError("documents mix text and token ids")
        batch.append(document)
        if len(batch) >= batch_size:
            yield flush()
            batch = []
    if batch:
        yield flush()


def tokenize_documents(
    documents: Iterable[str | Sequence[int]], tokenizer: Any | None, eos_id: int | None
) -> np.ndarray:
    """All documents as one token stream `[token]` (int64): text + EOS per document, or copied ids."""
    chunks = [tokens for tokens, _ in iter_token_chunks(documents, tokenizer, eos_id)]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.int64)


def write_token_stream(
    chunks: Iterable[tuple[np.ndarray, int]],
    path: str | Path,
    vocab_size: int,
    max_tokens: int | None = None,
    progress: Any | None = None,
) -> tuple[int, int]:
    """Stream token chunks into a 1-D .npy file of `token_dtype(vocab_size)`, stopping at `max_tokens`.

    Chunks go to a raw temporary file first (memory stays at one chunk, also for 10^9-token shards),
    then into the .npy. Returns (tokens written, documents consumed). Raises CorpusError when an id
    is outside the vocabulary.
    """
    path = Path(path)
    dtype = token_dtype(vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_tokens = n_documents = 0
    raw_fd, raw_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".raw")
    try:
        with os.fdopen(raw_fd, "wb") as raw:
            for tokens, docs in chunks:
                if max_tokens is not None:
                    tokens = tokens[: max_tokens - n_tokens]
                if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
                    bad = int(tokens.max() if tokens.max() >= vocab_size else tokens.min())
                    raise CorpusError(
                        f"token id {bad} is outside the tokenizer's vocabulary of {vocab_size} ids while writing "
                        f"{path}; the corpus was tokenized with a different tokenizer: fix the corpus's `tokenizer`"
                    )
                raw.write(tokens.astype(dtype).tobytes())
                n_tokens += int(tokens.size)
                n_documents += docs
                if progress is not None:
                    progress.update(int(tokens.size))
                if max_tokens is not None and n_tokens >= max_tokens:
                    break
        raw_tokens = np.memmap(raw_name, dtype=dtype, mode="r", shape=(n_tokens,)) if n_tokens else np.zeros(0, dtype)
        save_npy_atomic(np.asarray(raw_tokens), path)
        del raw_tokens
    finally:
        if os.path.exists(raw_name):
            os.remove(raw_name)
    return n_tokens, n_documents


def write_shard(tokens: np.ndarray, path: str | Path, meta: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """Write tokens `[token]` as a shard .npy plus its .json record; returns the record.

    The record is `meta` plus n_tokens, dtype, file and sha256 (of the .npy bytes).
    """
    path = Path(path)
    tokens = np.asarray(tokens).reshape(-1)
    n_tokens, _ = write_token_stream([(tokens, 0)], path, vocab_size)
    return write_shard_record(path, n_tokens, meta)


def write_shard_record(npy_path: str | Path, n_tokens: int, meta: dict[str, Any]) -> dict[str, Any]:
    """Write `shard_XXX.json` beside `shard_XXX.npy`: meta + n_tokens, dtype, file, sha256."""
    npy_path = Path(npy_path)
    stored = np.load(npy_path, mmap_mode="r")
    record = {
        **meta,
        "file": npy_path.name,
        "n_tokens": int(n_tokens),
        "dtype": str(stored.dtype),
        "sha256": sha256_file(npy_path),
    }
    write_json_atomic(npy_path.with_suffix(".json"), record)
    return record


def check_shard_size(
    n_found: int, quota: int | None, corpus_name: str, shard_index: int, n_shards: int, n_tokens: int | None
) -> None:
    """Fail when a capped shard found fewer tokens than its quota (the source is too small)."""
    if quota is not None and n_found < quota:
        raise CorpusError(
            f"corpus '{corpus_name}' is too small for n_tokens={n_tokens}: shard {shard_index} of {n_shards} "
            f"needs {quota} tokens but its documents hold only {n_found} (about {n_found * n_shards} in the "
            f"corpus); lower config key 'corpora.{corpus_name}.n_tokens' (or set it to null for the whole corpus)"
        )


def build_shard(
    corpus: dict[str, Any],
    corpus_name: str,
    shard_index: int,
    out_path: str | Path,
    tokenizer: Any,
    tokenizer_meta: dict[str, Any],
    progress: Any | None = None,
) -> dict[str, Any]:
    """Tokenize shard `shard_index` of a corpus entry into `out_path` (.npy) and its .json record.

    tokenizer: a transformers tokenizer (len() is its vocabulary; eos_token_id separates documents).
    tokenizer_meta: `headstab.refits.tokenizer.tokenizer_identity` of it. Returns the shard record.
    """
    n_shards = corpus["n_shards"]
    if not 0 <= shard_index < n_shards:
        raise CorpusError(
            f"corpus '{corpus_name}' has n_shards={n_shards}; shard {shard_index} does not exist "
            f"(valid: 000..{n_shards - 1:03d})"
        )
    eos_id = tokenizer.eos_token_id
    if eos_id is None and not corpus.get("pretokenized", False):
        raise CorpusError(
            f"tokenizer {tokenizer_meta.get('path')} of corpus '{corpus_name}' has no EOS token to separate documents; "
            "use a tokenizer with eos_token set"
        )
    quota = shard_token_quota(corpus.get("n_tokens"), n_shards, shard_index)
    documents = iter_documents(corpus, shard_index, n_shards, corpus_name)
    chunks = iter_token_chunks(documents, tokenizer, eos_id)
    n_found, n_documents = write_token_stream(chunks, out_path, len(tokenizer), quota, progress)
    check_shard_size(n_found, quota, corpus_name, shard_index, n_shards, corpus.get("n_tokens"))
    meta = {
        "corpus": corpus_name,
        "shard_index": shard_index,
        "n_shards": n_shards,
        "n_documents": n_documents,
        "token_quota": quota,
        "eos_token_id": None if corpus.get("pretokenized", False) else eos_id,
        "source": describe_source(corpus),
        "tokenizer": tokenizer_meta,
    }
    return write_shard_record(out_path, n_found, meta)


def aggregate_shard_records(records: Sequence[dict[str, Any]], corpus_name: str) -> dict[str, Any]:
    """Corpus meta.json content from its shard records (in shard order); checks they agree."""
    if not records:
        raise CorpusError(f"corpus '{corpus_name}': no shard records to aggregate")
    tokenizer_hashes = {r["tokenizer"].get("tokenizer_json_sha256") for r in records}
    if len(tokenizer_hashes) > 1:
        raise CorpusError(
            f"corpus '{corpus_name}': shards were tokenized with different tokenizers ({sorted(map(str, tokenizer_hashes))}); "
            "rebuild its shards with `snakemake --forcerun tokenize_shard` (with the run's --configfile)"
        )
    indices = [r["shard_index"] for r in records]
    if indices != list(range(len(records))) or records[0]["n_shards"] != len(records):
        raise CorpusError(
            f"corpus '{corpus_name}': shard records {indices} are not shards 0..{records[0]['n_shards'] - 1}"
        )
    return {
        "corpus": corpus_name,
        "n_tokens": sum(r["n_tokens"] for r in records),
        "n_documents": sum(r["n_documents"] for r in records),
        "n_shards": len(records),
        "dtype": records[0]["dtype"],
        "eos_token_id": records[0].get("eos_token_id"),
        "source": records[0]["source"],
        "tokenizer": records[0]["tokenizer"],
        "shards": [{key: r[key] for key in ("file", "n_tokens", "n_documents", "sha256")} for r in records],
    }


def corpus_content_sha256(meta: dict[str, Any]) -> str:
    """What training reads of a corpus, as one digest: the sha256 of its shards' sha256 in order (each of the
    .npy's bytes, header and dtype included). Nothing of when, where, by whom or under which path the corpus was
    built, so a corpus rebuilt to the same tokens keeps every trained refit's identity."""
    return hashlib.sha256("\n".join(shard["sha256"] for shard in meta["shards"]).encode()).hexdigest()


def read_corpus_meta(path: str | Path) -> dict[str, Any]:
    """A corpus meta.json (written by rule corpus_meta), with its file named in errors."""
    meta = read_json(path, what="corpus metadata")
    for key in ("n_tokens", "shards", "tokenizer", "dtype"):
        if key not in meta:
            raise CorpusError(
                f"corpus metadata {path} lacks '{key}'; rebuild it with `snakemake {shlex.quote(str(path))} --forcerun corpus_meta`"
            )
    return meta


def load_shards(paths: Iterable[str | Path]) -> list[np.memmap]:
    """Memory-mapped token shards, each `[token]` (uint16 or uint32), in the given order."""
    shards = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"token shard {path} does not exist; build it with `snakemake {shlex.quote(str(path))}` (rule tokenize_shard)"
            )
        array = np.load(path, mmap_mode="r", allow_pickle=False)
        if array.ndim != 1 or array.dtype not in (np.uint16, np.uint32):
            raise CorpusError(
                f"token shard {path} holds a {array.dtype} array of shape {array.shape}, not a 1-D "
                f"uint16/uint32 token stream; rebuild it with `snakemake {shlex.quote(str(path))} --forcerun tokenize_shard`"
            )
        shards.append(array)
    return shards
