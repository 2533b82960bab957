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


MIXED_LENGTHS = (7, 3, 9, 5, 2, 8, 4)  # out of order: length-sorted batches scatter over the file


def write_refit_caches(directory: Any, seeds: tuple[int, ...] = (1, 2, 3)) -> list[Any]:
    """Caches of seeded bridges (2 layers, 3 heads) written by the real writer: prompt sets "primary"
    (lengths MIXED_LENGTHS) and "short" (4, 4, 1). Returns the paths in seed order."""
    from pathlib import Path

    import numpy as np

    from headstab.activations.writer import CacheOptions, write_activation_cache

    rng = np.random.default_rng(3)
    token_sets = {
        "primary": [[0] + rng.integers(1, 50, size=n - 1).tolist() for n in MIXED_LENGTHS],
        "short": [[0] + rng.integers(1, 50, size=n - 1).tolist() for n in (4, 4, 1)],
    }
    paths = []
    for seed in seeds:
        model = tiny_bridge(n_layers=2, n_heads=3, d_model=24, d_head=8, d_mlp=48, n_ctx=16, d_vocab=50, seed=seed)
        path = Path(directory) / f"seed{seed}.h5"
        write_activation_cache(
            path, model, token_sets, pad_token_id=0, options=CacheOptions(batch_size=3, show_progress=False)
        )
        paths.append(path)
    return paths
