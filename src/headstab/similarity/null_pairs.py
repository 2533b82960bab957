"""The pair-similarity tensor under the prompt-permutation null, every pair of layers (paper §3.3, §4.2).

Head (l, i) of refit a on prompt p is compared with head (l', j) of refit b on p's partner q
(`headstab.similarity.prompt_groups.null_partners`: the same token length, or the nearest, both cut to
the shorter prompt's first rows), the cosine of their lower triangles averaged over prompts: the same
S[a, b, l, i, l', j] as the observed tensor (Eq. 2), for patterns that share nothing but their length. The
cross-layer best match of a head is a maximum over every head of every layer, so its chance level grows with
the number of layers; the same maximum over this tensor is that chance level. Its same-layer blocks are the
prompt groups' null averaged over the groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headstab.activations.reader import open_cache
from headstab.similarity.pairs import promptset_pattern_shape
from headstab.similarity.prompt_groups import check_partners, prompt_features

__all__ = ["null_pair_similarity", "null_pair_similarity_from_caches"]


def _keep(lengths: np.ndarray, partners: np.ndarray) -> np.ndarray:
    """The query rows the null compares of each prompt and its partner: the shorter prompt's."""
    return np.minimum(lengths, lengths[partners])


def _product(anchors: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """float32 anchors @ candidates.T ([row, feature] each) through torch's GEMM."""
    import torch

    return (torch.from_numpy(anchors) @ torch.from_numpy(candidates).T).numpy()


def null_pair_similarity(
    blocks: Sequence[np.ndarray], offsets: np.ndarray, lengths: np.ndarray, partners: np.ndarray, n_seeds: int
) -> np.ndarray:
    """The null tensor from patterns in memory, in one product.

    blocks: one float32 [seed * head, entry] per layer, packed lower triangles (rows ordered seed, head;
    prompt p's entries at offsets[p]:offsets[p + 1]), not normalised; partners: int64 [prompt].
    Returns float32 S0 [seed_a, seed_b, layer_a, head_a, layer_b, head_b].
    """
    lengths, partners = np.asarray(lengths, dtype=np.int64), np.asarray(partners, dtype=np.int64)
    check_partners(partners, lengths.size)
    keep, prompts = _keep(lengths, partners), np.arange(lengths.size)
    blocks = [np.asarray(block, dtype=np.float32) for block in blocks]
    anchors = np.concatenate([prompt_features(block, offsets, prompts, lengths, keep) for block in blocks])
    candidates = np.concatenate([prompt_features(block, offsets, partners, lengths, keep) for block in blocks])
    n_layers, n_heads = len(blocks), blocks[0].shape[0] // n_seeds
    gram = _product(anchors, candidates).reshape(n_layers, n_seeds, n_heads, n_layers, n_seeds, n_heads)
    return np.ascontiguousarray(gram.transpose(1, 4, 0, 2, 3, 5))


def _read_layer(readers, promptset: str, layer: int, block: np.ndarray, n_heads: int) -> None:
    for refit, reader in enumerate(readers):
        reader.hook_pattern_lower(promptset, layer=layer, out=block[refit * n_heads : (refit + 1) * n_heads])


def null_pair_similarity_from_caches(
    cache_paths: Sequence[str | Path], promptset: str, partners: np.ndarray, progress: bool = True
) -> np.ndarray:
    """The null tensor of one architecture's refits, streamed from their caches (`null_pair_similarity`).

    cache_paths: one cache per refit, in seed order; partners: int64 [prompt] (`null_partners` of the set's
    lengths). Each anchor layer reads every candidate layer again: n_layers^2 - n_layers + 1 reads of one
    layer's patterns of all refits. Memory: one layer's patterns of all refits, three times (the block read,
    its anchors' and its candidates' features). Returns float32 S0 [seed_a, seed_b, layer_a, head_a, layer_b, head_b].
    """
    from tqdm.auto import tqdm

    n_seeds, n_layers, n_heads = promptset_pattern_shape(cache_paths, promptset)
    readers = [open_cache(path) for path in cache_paths]
    try:
        offsets, lengths = readers[0].pattern_offsets(promptset), readers[0].lengths(promptset)
        partners = np.asarray(partners, dtype=np.int64)
        check_partners(partners, lengths.size)
        keep, prompts = _keep(lengths, partners), np.arange(lengths.size)
        out = np.empty((n_seeds, n_seeds, n_layers, n_heads, n_layers, n_heads), dtype=np.float32)
        block, held = np.empty((n_seeds * n_heads, int(offsets[-1])), dtype=np.float32), None
        for la in tqdm(range(n_layers), desc=f"null similarity {promptset}", unit="layer", disable=not progress):
            # Candidate layers la, la - 1, ..., la + 1: the last is the next anchor layer, read once for both.
            for lb in [(la - k) % n_layers for k in range(n_layers)]:
                if held != lb:
                    _read_layer(readers, promptset, lb, block, n_heads)
                    held = lb
                if lb == la:
                    anchors = prompt_features(block, offsets, prompts, lengths, keep)
                candidates = prompt_features(block, offsets, partners, lengths, keep)
                gram = _product(anchors, candidates).reshape(n_seeds, n_heads, n_seeds, n_heads)
                out[:, :, la, :, lb, :] = gram.transpose(0, 2, 1, 3)
    finally:
        for reader in readers:
            reader.close()
    return out
