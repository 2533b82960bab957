"""Simulated data with the dependence of the real data, for the calibration cases: symmetric pair blocks
(s[a, b] = s[b, a]), refit effects shared by every pair a refit enters, refit-specific layer offsets of mean zero
over refits, sharper and broader layers, prompt groups."""

from __future__ import annotations

import numpy as np

__all__ = ["layered_grouped_similarity", "symmetric_pair_values"]


def symmetric_pair_values(rng: np.random.Generator, refit_effect: np.ndarray, pair_sd: float) -> np.ndarray:
    """[refit, refit] values refit_effect[a] + refit_effect[b] + symmetric pair noise (s.d. pair_sd), diagonal 0."""
    n = len(refit_effect)
    noise = rng.normal(scale=pair_sd, size=(n, n))
    values = refit_effect[:, None] + refit_effect[None, :] + (noise + noise.T) / np.sqrt(2)
    np.fill_diagonal(values, 0.0)
    return values


def _symmetric_pairs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Unit noise [..., refit_a, refit_b, layer, head_a, head_b] with x[a, b, l, i, j] = x[b, a, l, j, i]."""
    noise = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(np.sqrt(0.5))
    return noise + np.swapaxes(np.swapaxes(noise, -5, -4), -2, -1)


def _prompt_profile(rng: np.random.Generator, weights: np.ndarray, n_layers: int, sd: float) -> np.ndarray:
    """[group, layer] shifts whose size-weighted mean over groups has s.d. `sd` per layer (mean 0)."""
    return rng.normal(scale=sd / np.sqrt(np.sum(weights**2)), size=(len(weights), n_layers))


def layered_grouped_similarity(
    rng: np.random.Generator,
    n_groups: int,
    stability: np.ndarray,
    commonness: np.ndarray,
    n_heads: int = 4,
    confound: float = 0.0,
    prompt_sd: tuple[float, float] = (0.0, 0.0),
):
    """Prompt-group similarity tensors (`headstab.similarity.prompt_groups.GroupedSimilarity`) of refits
    whose layers differ, with the dependence of real ones, and each head's expected commonness.

    stability, commonness: [refit, layer] what each refit's layer adds above chance: to its heads' match with
    their counterpart (head i of every other refit) and to the similarity of peer heads within the refit.
    - sharper and broader layers: each layer has its own chance floor (0.3-0.6) and noise (0.02-0.06);
    - a refit's sharper layer: sharpness offsets of mean zero over refits lower the floor of every pair the
      refit enters (observed and null alike) and its heads' entropy; `confound` x the sharpness (the floor's
      distance below 0.45, linear in the entropy) adds to what the layer adds above chance, to stability and
      commonness alike;
    - symmetric pair blocks s[a, b, l, i, j] = s[b, a, l, j, i]; a head against itself is 1 on its prompt and
      floor + 0.3 on a partner prompt (the null's diagonal);
    - prompt groups of 3 or 4 prompts, each group's noise shrinking with its size; prompt_sd (stability,
      commonness): the s.d. of a per-layer shift shared by every refit (prompts on which a layer's heads
      agree across refits, or are alike within one), drawn per group.
    Returns (grouped, truth): truth float64 [refit, layer, head] arrays "commonness_excl_self",
    "commonness_excl_self_null", "commonness_excl_self_above_null" and "commonness" (Eq. 10): expectations
    over the population of prompts.
    """
    from headstab.similarity.prompt_groups import GroupedSimilarity

    n_refits, n_layers = stability.shape
    floor, spread = rng.uniform(0.3, 0.6, size=n_layers), rng.uniform(0.02, 0.06, size=n_layers)
    offsets = rng.normal(scale=0.03, size=(n_refits, n_layers))
    offsets -= offsets.mean(axis=0)
    refit_floor = floor - offsets  # a sharper refit layer (offset > 0) sits lower
    n_prompts = 3 * n_groups + int(rng.integers(n_groups))  # split as prompt_groups splits: sizes differ by <= 1
    sizes = np.array([len(part) for part in np.array_split(np.arange(n_prompts), n_groups)])
    weights = sizes / sizes.sum()
    shape = (n_groups, n_refits, n_refits, n_layers, n_heads, n_heads)
    scale = (spread * np.sqrt(sizes.mean() / sizes)[:, None])[:, None, None, :, None, None]
    pair_floor = ((refit_floor[:, None] + refit_floor[None, :]) / 2)[None, ..., None, None]
    null = pair_floor + _symmetric_pairs(rng, shape) * scale
    observed = pair_floor + _symmetric_pairs(rng, shape) * scale
    eye = np.eye(n_heads, dtype=bool)
    sharpness = 0.45 - refit_floor  # [refit, layer]; the entropy below is linear in it
    above = stability + confound * sharpness
    agreement = (above[:, None] + above[None, :]) / 2  # [a, b, layer]
    observed[..., eye] += (
        agreement[None, ..., None] + _prompt_profile(rng, weights, n_layers, prompt_sd[0])[:, None, None, :, None]
    )
    peers = commonness + confound * sharpness
    shared = _prompt_profile(rng, weights, n_layers, prompt_sd[1])  # [group, layer]
    for refit in range(n_refits):
        block, null_block = observed[:, refit, refit], null[:, refit, refit]  # views [group, layer, head, head]
        block += (peers[refit] + shared)[..., None, None]
        block[..., eye] = 1.0
        null_block[..., eye] = (refit_floor[refit] + 0.3)[None, :, None]
    entropy = 0.5 + 0.5 * refit_floor[..., None] + rng.normal(scale=0.002, size=(n_refits, n_layers, n_heads))
    lengths = np.full(int(sizes.sum()), 8)
    partners = np.roll(np.arange(lengths.size), 1)
    grouped = GroupedSimilarity(
        observed.astype(np.float32), null.astype(np.float32), sizes, list(range(n_refits)), partners, lengths, entropy
    )
    excl = np.repeat((refit_floor + peers)[..., None], n_heads, axis=-1)
    excl_null = np.repeat(refit_floor[..., None], n_heads, axis=-1)
    truth = {
        "commonness_excl_self": excl,
        "commonness_excl_self_null": excl_null,
        "commonness_excl_self_above_null": excl - excl_null,
        "commonness": (1.0 + (n_heads - 1) * excl) / n_heads,
    }
    return grouped, truth
