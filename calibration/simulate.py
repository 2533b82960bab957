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


def layered_grouped_similarity(
    rng: np.random.Generator,
    n_refits: int,
    floors: np.ndarray,
    spreads: np.ndarray,
    offset_sds: np.ndarray,
    above_null: np.ndarray,
    n_heads: int = 3,
    n_groups: int = 2,
    refit_sd: float = 0.03,
):
    """A `GroupedSimilarity` of n_refits refits with len(floors) layers whose stability above the null is
    `above_null` [layer]: observed s[g, a, b, l, i, j] = floors[l] + above_null[l] + u[a, l] + u[b, l] + r[a] + r[b]
    + spreads[l] e, null = floors[l] + spreads[l] e', with e, e' symmetric pair blocks (e[a, b, l, i, j] =
    e[b, a, l, j, i]) of independent normals per prompt group, u refit-specific layer offsets (s.d. offset_sds[l],
    mean zero over refits), r refit effects. Observed and null noise share their distribution per layer, so the
    expected best match above the null of layer l is above_null[l] whatever its floor and spread."""
    from headstab.similarity.prompt_groups import GroupedSimilarity

    floors, spreads = np.asarray(floors, dtype=np.float64), np.asarray(spreads, dtype=np.float64)
    n_layers = len(floors)
    shape = (n_groups, n_refits, n_refits, n_layers, n_heads, n_heads)

    def pair_noise() -> np.ndarray:
        noise = rng.normal(size=shape)
        return (noise + noise.transpose(0, 2, 1, 3, 5, 4)) / np.sqrt(2) * spreads[:, None, None]

    offsets = rng.normal(size=(n_refits, n_layers)) * np.asarray(offset_sds) + rng.normal(size=(n_refits, 1)) * refit_sd
    shift = (offsets[:, None, :] + offsets[None, :, :])[..., None, None]
    base = floors[:, None, None]
    observed = base + np.asarray(above_null)[:, None, None] + shift + pair_noise()
    null = base + pair_noise()
    return GroupedSimilarity(
        observed=observed.astype(np.float32),
        null=null.astype(np.float32),
        group_sizes=np.full(n_groups, 10),
        seeds=list(range(1, n_refits + 1)),
        partners=np.array([1, 0]),
        lengths=np.array([5, 5]),
    )
