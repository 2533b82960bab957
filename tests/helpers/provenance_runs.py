"""A run's provenance laid out by hand as the workflow writes it: a corpus of two shards and a checkpoint whose
meta.json records it; and a flipped bit, for the checks that must catch it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headstab.fileio import sha256_file, write_json_atomic


def fake_run(root: Path, tokenizer: bool = False) -> Path:
    """A corpus with two shards and one checkpoint that records it, as the workflow writes them; with `tokenizer`,
    the corpus records the tokenizer it was made with (tokenizers/toy_bpe: a tokenizer.json and its meta.json)."""
    data = root / "data" / "toy"
    data.mkdir(parents=True)
    shards = []
    for index in range(2):
        shard = data / f"shard_{index:03d}.npy"
        np.save(shard, np.arange(10, dtype=np.uint16) + index)
        shards.append({"file": shard.name, "n_tokens": 10, "sha256": sha256_file(shard)})
    corpus_meta = data / "meta.json"
    corpus: dict = {"corpus": "toy", "n_tokens": 20, "shards": shards}
    if tokenizer:
        directory = root / "tokenizers" / "toy_bpe"
        directory.mkdir(parents=True)
        (directory / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "b": 1}}}')
        identity = {"path": str(directory), "tokenizer_json_sha256": sha256_file(directory / "tokenizer.json")}
        write_json_atomic(directory / "meta.json", identity)
        corpus["tokenizer"] = identity
    write_json_atomic(corpus_meta, corpus)
    checkpoint = root / "l2_h4" / "checkpoints" / "seed1"
    checkpoint.mkdir(parents=True)
    (checkpoint / "final.pt").write_bytes(b"weights")
    write_json_atomic(
        checkpoint / "meta.json",
        {
            "architecture": {"name": "l2_h4"},
            "seed": 1,
            "final_weights_sha256": sha256_file(checkpoint / "final.pt"),
            "corpus": {"meta": str(corpus_meta), "meta_sha256": sha256_file(corpus_meta)},
            "environment": {"git_commit": "abc123", "device": "cpu"},
        },
    )
    return checkpoint / "final.pt"


def flip_middle_byte(path: Path, start: int = 0, size: int | None = None) -> None:
    """Flip one bit of the byte in the middle of path[start:start + size] (default: the whole file)."""
    size = path.stat().st_size - start if size is None else size
    data = bytearray(path.read_bytes())
    data[start + size // 2] ^= 0x01
    path.write_bytes(bytes(data))
