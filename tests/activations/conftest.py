"""Shared by the activation-cache tests: a tiny TransformerBridge, prompt sets of mixed lengths, and caches
written from them by the real writer."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers.bridges import tiny_bridge
from helpers.tolerances import reduction_atol

from headstab.activations.h5util import ATTRS_DIGEST, stamp_attribute_digests
from headstab.activations.writer import CacheOptions, write_activation_cache

N_LAYERS, N_HEADS, D_MODEL, D_HEAD, N_CTX, D_VOCAB = 2, 4, 32, 8, 24, 60
# A batched forward pass and a single-prompt one sum in different orders: float32 sums of up to
# N_LAYERS x (d_model + d_mlp + N_CTX) terms along the way, relative to each activation's size.
FORWARD_TERMS = N_LAYERS * (D_MODEL + 64 + N_CTX)


def forward_atol(values: np.ndarray) -> float:
    return reduction_atol(np.float32, FORWARD_TERMS, float(np.abs(values).max()))


def make_model(attn_only: bool = False, seed: int = 1, n_heads: int = N_HEADS, n_ctx: int = N_CTX):
    return tiny_bridge(
        n_layers=N_LAYERS,
        n_heads=n_heads,
        d_model=D_MODEL,
        d_head=D_HEAD,
        n_ctx=n_ctx,
        d_vocab=D_VOCAB,
        seed=seed,
        attn_only=attn_only,
    )


def edited_copy(source: Path, destination: Path, edit, restamp: bool = True) -> Path:
    """A copy of the cache at `source`, changed in place by `edit(h5py handle)`: a damaged or foreign file.
    restamp: the attributes' digests recomputed after the edit, as if a writer had written the file that way
    (False: the edit is damage the digests catch)."""
    destination.write_bytes(source.read_bytes())
    with h5py.File(destination, "a") as handle:
        edit(handle)
        if restamp and ATTRS_DIGEST in handle.attrs:
            stamp_attribute_digests(handle)
    return destination


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def token_sets():
    rng = np.random.default_rng(0)
    make = lambda lengths: [[1] + rng.integers(2, D_VOCAB, size=n - 1).tolist() for n in lengths]  # noqa: E731
    # Lengths out of order so that length-sorted batching has to write rows back in file order.
    return {"primary": make([7, 3, 12, 5, 9, 2, 11]), "len5": make([5, 5, 5])}


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("cache") / "seed1.h5"
    write_activation_cache(
        path,
        model,
        token_sets,
        pad_token_id=0,
        options=CacheOptions(batch_size=3, compression_level=1, show_progress=False),
        prompt_texts={"primary": [f"prompt {i}" for i in range(7)], "len5": ["a b", "c d", "ünï"]},
        set_attrs={"primary": {"prompt_file": "p.json", "prompt_file_sha256": "ab" * 32}},
        attrs={"architecture": "tiny", "seed": 1, "packages": {"h5py": h5py.__version__}},
    )
    return path


@pytest.fixture(scope="module")
def resid_pre_cache_path(tmp_path_factory, model, token_sets):
    path = tmp_path_factory.mktemp("cache_pre") / "seed1.h5"
    write_activation_cache(
        path,
        model,
        token_sets,
        pad_token_id=0,
        options=CacheOptions(
            batch_size=3, extra_resid_hooks=("hook_resid_pre",), compression_level=1, show_progress=False
        ),
    )
    return path
