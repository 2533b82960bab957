"""Refits whose layers are exchangeable by construction, through the published-refit path: random attention-only
TransformerLens 2 heads whose W_O and b_O are zero write nothing, so every layer reads the same embeddings and the
layers of a refit differ only by their own random draws (helpers.published_refits.tl2_state_dict)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headstab.plan.spec import ArchitectureSpec
from helpers.published_refits import tl2_state_dict

N_LAYERS, N_HEADS, N_PROMPTS, N_GROUPS = 4, 4, 16, 4


def silent_spec(tiny: dict) -> ArchitectureSpec:
    """An attention-only 4-layer, 4-head architecture from the tests' tiny one."""
    return ArchitectureSpec(
        **{**tiny, "name": "l4_h4_attn", "n_layers": N_LAYERS, "n_heads": N_HEADS, "attn_only": True}
    )


def silent_state_dict(spec: ArchitectureSpec, seed: int) -> dict:
    """A TL2 state dict of `spec` with seeded random weights whose heads write nothing (W_O = 0, b_O = 0)."""
    state = tl2_state_dict(spec, seed, with_buffers=False)
    for layer in range(spec.n_layers):
        state[f"blocks.{layer}.attn.W_O"].zero_()
        state[f"blocks.{layer}.attn.b_O"].zero_()
    return state


def exchangeable_fixture(model, spec: ArchitectureSpec, seeds: tuple[int, ...], draw: int, directory: Path) -> dict:
    """One fixture: the caches of `seeds` refits (fixture draw `draw`: its own weights and prompts) written by the
    workflow's cache writer from converted TL2 state dicts, and their prompt-group similarity as rule
    prompt_group_similarity builds it. Returns {"caches": [path], "grouped": GroupedSimilarity}."""
    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.refits.published import convert_tl2_state_dict
    from headstab.similarity.prompt_groups import (
        GroupedSimilarity,
        grouped_arrays_from_caches,
        null_partners,
        prompt_groups,
    )

    rng = np.random.default_rng([draw, 7])
    lengths = rng.integers(6, spec.n_ctx - 3, size=N_PROMPTS)
    tokens = {"primary": [[0, *rng.integers(1, spec.d_vocab, size=n - 1).tolist()] for n in lengths]}
    caches = []
    for seed in seeds:
        model.load_state_dict(convert_tl2_state_dict(silent_state_dict(spec, 1000 * draw + seed), spec))
        path = directory / f"draw{draw}_seed{seed}.h5"
        options = CacheOptions(batch_size=N_PROMPTS, show_progress=False)
        write_activation_cache(path, model, tokens, pad_token_id=0, options=options)
        caches.append(path)
    groups, partners = prompt_groups(N_PROMPTS, N_GROUPS, seed=draw), null_partners(lengths, seed=draw)
    arrays = grouped_arrays_from_caches(caches, "primary", groups, partners, progress=False)
    sizes = np.array([len(group) for group in groups])
    grouped = GroupedSimilarity(arrays["observed"], arrays["null"], sizes, list(seeds), partners, lengths)
    return {"caches": caches, "grouped": grouped}
