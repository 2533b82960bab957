"""Shared test fixtures. Keep them small and generic; stage-specific helpers live in their test files."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from headstab.config import ArchitectureSpec

TINY_ARCHITECTURE: dict[str, Any] = {
    "name": "tiny",
    "n_layers": 2,
    "n_heads": 2,
    "d_model": 16,
    "d_head": 8,
    "d_mlp": 32,
    "n_ctx": 16,
    "d_vocab": 32,
    "act_fn": "gelu",
    "normalization_type": "LN",
    "positional_embedding_type": "standard",
    "init_mode": "gpt2",
    "attn_only": False,
    "tokenizer": "tiny_tokenizer",
    "corpus": "tiny_corpus",
    "optimizer": "adam",
    "weight_decay": 0.0,
    "lr": 1e-2,
    "batch_size": 4,
    "seq_len": 16,
    "epochs": 1,
    "n_tokens": None,
    "checkpoint_every": 4,
    "log_every": 2,
    "seeds": (1, 2),
}


@pytest.fixture
def tiny_spec() -> Callable[..., ArchitectureSpec]:
    """Factory of tiny ArchitectureSpecs (2 layers, 2 heads, d_model 16, n_ctx 16, vocab 32); keywords override fields."""

    def make(**overrides: Any) -> ArchitectureSpec:
        return ArchitectureSpec(**{**TINY_ARCHITECTURE, **overrides})

    return make
