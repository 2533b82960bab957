"""Multi-bootstrap of stability over refits and prompts jointly, from prompt-group similarity tensors.

One resample draws, with replacement and from one seeded generator:
- prompt groups: counts c[g] over the G groups (`prompt_groups`); the similarity becomes the
  size-weighted mean over the drawn groups, S_r = sum_g c_g n_g S_g / sum_g c_g n_g;
- for each anchor refit a, its N - 1 pair refits from the other refits (per-anchor statistics: the
  anchor is the refit the head belongs to, so it is fixed, as in the head_stability table);
- refits for the pooled statistics: counts k[s] over all N refits; an ordered pair (a, b), a != b,
  weighs k_a k_b, so a refit drawn twice is never compared with itself. Draws with fewer than two
  distinct refits are redrawn.
Then max over candidate heads (Eq. 3), means over pairs (Eq. 4) and heads (Eq. 5), as for the point
estimate. The percentile interval of the replicates is the confidence interval.

One-to-one stability (`headstab.matching`) keeps the assignment solved on the full data and resamples the
assigned partners' similarity (`one_to_one_replicates`): a Hungarian solve per resample, pair and layer
would cost more than the rest of the bootstrap. docs/statistics.md gives the direction of the difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headstab.matching import assigned_values
from headstab.similarity.prompt_groups import group_mean

__all__ = [
    "BATCH_ELEMENTS",
    "Resamples",
    "best_match",
    "draw_resamples",
    "one_to_one_replicates",
    "percentile_interval",
    "prompt_weights",
    "replicate_best_matches",
    "stability_replicates",
]


# Similarities mixed per batch of resamples: small tensors go in few batches, large ones stay within 64 MiB.
BATCH_ELEMENTS = 2**24


@dataclass(frozen=True)
class Resamples:
    """What each of n_boot resamples drew: counts, so a statistic is a weighted mean."""

    prompt_counts: np.ndarray  # int64 [boot, group]
    pair_counts: np.ndarray  # int64 [boot, anchor, pair]: zero diagonal, each row sums to N - 1
    refit_counts: np.ndarray  # int64 [boot, seed]: sums to N, at least two nonzero

    @property
    def n_boot(self) -> int:
        return self.prompt_counts.shape[0]

    def pair_weights(self) -> np.ndarray:
        """float64 [boot, seed_a, seed_b]: k_a k_b off the diagonal, normalised to sum to one per resample."""
        k = self.refit_counts
        weights = k[:, :, None] * k[:, None, :]
        weights[:, np.arange(k.shape[1]), np.arange(k.shape[1])] = 0
        return weights / weights.sum(axis=(1, 2), keepdims=True)


def _counts(draws: np.ndarray, n: int) -> np.ndarray:
    """[..., draw] indices in 0..n-1 -> int64 [..., n] counts."""
    flat = draws.reshape(-1, draws.shape[-1])
    offsets = np.arange(flat.shape[0])[:, None] * n
    counts = np.bincount((flat + offsets).ravel(), minlength=flat.shape[0] * n)
    return counts.reshape(*draws.shape[:-1], n)


def draw_resamples(n_boot: int, n_seeds: int, n_groups: int, seed: int) -> Resamples:
    """The resamples of one bootstrap; the same arguments give the same draws."""
    if n_seeds < 2:
        raise ValueError(f"the bootstrap needs at least 2 refits; got {n_seeds}")
    if n_boot < 1 or n_groups < 1:
        raise ValueError(f"n_boot and n_groups must be >= 1; got {n_boot}, {n_groups}")
    rng = np.random.default_rng(seed)
    prompt_counts = _counts(rng.integers(n_groups, size=(n_boot, n_groups)), n_groups)
    others = rng.integers(n_seeds - 1, size=(n_boot, n_seeds, n_seeds - 1))
    others += others >= np.arange(n_seeds)[None, :, None]  # index k of the others of anchor a: k, or k + 1 from a on
    pair_counts = _counts(others, n_seeds)
    refits = rng.integers(n_seeds, size=(n_boot, n_seeds))
    while (bad := np.flatnonzero(np.ptp(refits, axis=1) == 0)).size:
        refits[bad] = rng.integers(n_seeds, size=(bad.size, n_seeds))
    return Resamples(prompt_counts, pair_counts, _counts(refits, n_seeds))


def prompt_weights(prompt_counts: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """float64 [boot, group]: each resample's weight on each group's mean, c_g n_g / sum_g c_g n_g, so the
    weighted sum is the mean over the resample's prompts."""
    weights = prompt_counts * np.asarray(group_sizes)[None, :]
    return weights / weights.sum(axis=1, keepdims=True)


def best_match(similarity: np.ndarray) -> np.ndarray:
    """Best match over candidate heads (Eq. 3): [..., head_a, head_b] -> [..., head_a]."""
    return similarity.max(axis=-1)


def replicate_best_matches(
    grouped: np.ndarray, group_sizes: np.ndarray, prompt_counts: np.ndarray, batch_size: int | None = None
):
    """Yield (resample slice, float32 [batch, seed_a, seed_b, layer, head_a]) best matches of the
    prompt-resampled similarity; grouped: [group, seed_a, seed_b, layer, head_a, head_b]. batch_size: resamples
    per batch (None: as many as fill BATCH_ELEMENTS similarities, at least 16)."""
    import torch

    n_groups = grouped.shape[0]
    flat = torch.from_numpy(np.ascontiguousarray(grouped, dtype=np.float32).reshape(n_groups, -1))
    weights = prompt_weights(prompt_counts, group_sizes).astype(np.float32)
    if batch_size is None:
        batch_size = max(16, BATCH_ELEMENTS // max(flat.shape[1], 1))
    for start in range(0, weights.shape[0], batch_size):
        stop = min(start + batch_size, weights.shape[0])
        mixed = (torch.from_numpy(weights[start:stop]) @ flat).reshape(stop - start, *grouped.shape[1:])
        yield slice(start, stop), mixed.amax(dim=-1).numpy()


def _head_means(best: np.ndarray, pair_counts: np.ndarray, n_seeds: int) -> np.ndarray:
    """[boot, a, b, layer, head] best matches, [boot, a, b] pair counts -> [boot, a, layer, head] (Eq. 4)."""
    return np.einsum("rab,rabli->rali", pair_counts.astype(np.float32), best, optimize=True) / (n_seeds - 1)


def _pooled_layers(best: np.ndarray, pair_weights: np.ndarray) -> np.ndarray:
    """[boot, a, b, layer, head], [boot, a, b] weights summing to one -> [boot, layer]: pair- and head-mean."""
    return np.einsum("rab,rabl->rl", pair_weights, best.mean(axis=-1, dtype=np.float64), optimize=True)


def stability_replicates(
    resamples: Resamples,
    grouped: np.ndarray | None = None,
    group_sizes: np.ndarray | None = None,
    best: np.ndarray | None = None,
    batch_size: int | None = None,
) -> dict[str, np.ndarray]:
    """Bootstrap replicates of head stability (per anchor) and pooled layer stability.

    Either grouped [group, seed_a, seed_b, layer, head_a, head_b] with group_sizes (refits and prompts
    resampled), or best [seed_a, seed_b, layer, head] best matches already taken (prompts fixed: refits
    only, e.g. cross-layer matches from the pair-similarity tensor).
    Returns "head" float64 [boot, anchor, layer, head], "layer" [boot, layer] (mean over ordered pairs
    of distinct refits and heads) and the point estimates "head_estimate" [anchor, layer, head],
    "layer_estimate" [layer], "pair_best" [seed_a, seed_b, layer, head] (the full-data best matches).
    """
    pair_weights = resamples.pair_weights()
    n_seeds = resamples.refit_counts.shape[1]
    if best is not None:
        best = np.asarray(best, dtype=np.float64)
        head = np.einsum("rab,abli->rali", resamples.pair_counts, best) / (n_seeds - 1)
        layer = np.einsum("rab,abl->rl", pair_weights, best.mean(axis=-1))
        pair_best = best
    else:
        if grouped is None or group_sizes is None:
            raise ValueError("give either grouped and group_sizes, or best")
        head = np.empty((resamples.n_boot, n_seeds, *grouped.shape[3:5]))
        layer = np.empty((resamples.n_boot, grouped.shape[3]))
        batches = replicate_best_matches(grouped, group_sizes, resamples.prompt_counts, batch_size)
        for part, batch_best in batches:
            head[part] = _head_means(batch_best, resamples.pair_counts[part], n_seeds)
            layer[part] = _pooled_layers(batch_best, pair_weights[part])
        pair_best = best_match(group_mean(grouped, group_sizes))
    off_diagonal = 1.0 - np.eye(n_seeds)
    head_estimate = np.einsum("ab,abli->ali", off_diagonal, pair_best) / (n_seeds - 1)
    layer_estimate = np.einsum("ab,abl->l", off_diagonal, pair_best.mean(axis=-1)) / (n_seeds * (n_seeds - 1))
    return {
        "head": head,
        "layer": layer,
        "head_estimate": head_estimate,
        "layer_estimate": layer_estimate,
        "pair_best": pair_best,
    }


def one_to_one_replicates(
    resamples: Resamples,
    grouped: np.ndarray,
    group_sizes: np.ndarray,
    assignment: np.ndarray,
    batch_size: int | None = None,
) -> dict[str, np.ndarray]:
    """Bootstrap replicates of one-to-one stability, as `stability_replicates` returns them.

    grouped: [group, seed_a, seed_b, layer, head_a, head_b]; assignment: int [seed_a, seed_b, layer, head_a]
    solved once on the full data (`headstab.matching.one_to_one_assignment`). Each resample reweights the
    prompt groups and refits of the assigned partners' similarity; the assignment is not solved again, so
    a layer's replicate (the mean over its heads) is never above the one a solve per resample would give.
    """
    assigned = assigned_values(grouped, assignment)[..., None]  # one candidate per head: the max is the value
    return stability_replicates(resamples, assigned, group_sizes, batch_size=batch_size)


def percentile_interval(replicates: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(low, high): the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles over axis 0 (NaNs ignored)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"config key 'statistics.confidence' must be in (0, 1); got {confidence}")
    alpha = (1.0 - confidence) / 2.0
    replicates = np.asarray(replicates)
    # nanquantile sorts column by column; without NaNs the vectorised quantile gives the same values.
    quantile = np.nanquantile if np.isnan(replicates).any() else np.quantile
    low, high = quantile(replicates, [alpha, 1.0 - alpha], axis=0)
    return low, high
