"""Tiny from-scratch TransformerBridge models for the tests (TransformerLens 4's `boot_native`)."""

from __future__ import annotations

from typing import Any


def tiny_bridge(
    *,
    n_layers: int = 2,
    n_heads: int = 4,
    d_model: int = 32,
    d_head: int = 8,
    d_mlp: int = 64,
    n_ctx: int = 32,
    d_vocab: int = 50,
    seed: int = 1,
    attn_only: bool = False,
) -> Any:
    """A GPT-2-style bridge (GELU, LayerNorm, learned positions, gpt2 init) at its seeded initialisation;
    attention-only models have no MLP."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    cfg = TransformerBridgeConfig(
        n_layers=n_layers,
        n_heads=n_heads,
        d_model=d_model,
        d_head=d_head,
        d_mlp=None if attn_only else d_mlp,
        n_ctx=n_ctx,
        d_vocab=d_vocab,
        act_fn="gelu",
        normalization_type="LN",
        positional_embedding_type="standard",
        init_mode="gpt2",
        seed=seed,
        attn_only=attn_only,
    )
    return TransformerBridge.boot_native(cfg)
