"""Shared by the corpus tests: a synthetic document sample, a small BPE tokenizer, local-source entries."""

from __future__ import annotations

import numpy as np
import pytest

from headstab.data.synthetic import generate_synthetic_documents

DOCS = list(generate_synthetic_documents(seed=0, n_documents=300))


@pytest.fixture(scope="package")
def tokenizer_dir(tmp_path_factory):
    from headstab.refits.tokenizer import train_bpe_tokenizer, write_tokenizer_meta

    out = tmp_path_factory.mktemp("tok") / "bpe"
    train_bpe_tokenizer(DOCS[:100], vocab_size=300, out_dir=out)
    write_tokenizer_meta(out, {"source": "train", "corpus": "test", "vocab_size": 300})
    return out


@pytest.fixture(scope="package")
def tokenizer(tokenizer_dir):
    from headstab.refits.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer_dir)


@pytest.fixture(scope="package")
def identity(tokenizer_dir):
    from headstab.refits.tokenizer import tokenizer_identity

    return tokenizer_identity(tokenizer_dir)


def local_corpus(path, **extra):
    """A `corpora.<name>` entry of source local reading `path`; keywords override keys."""
    return {
        "source": "local",
        "path": str(path),
        "tokenizer": "t",
        "n_shards": 1,
        "n_tokens": None,
        "streaming": True,
        "split": "train",
        "text_column": "text",
        **extra,
    }


def eos_segments(stream: np.ndarray, eos_id: int) -> list[np.ndarray]:
    """The documents of a token stream, each ending in its EOS token."""
    cuts = np.flatnonzero(stream == eos_id)
    return np.split(stream, cuts + 1)[:-1]
