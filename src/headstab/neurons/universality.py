"""Neuron universality (Gurnee et al. 2024) from streamed statistics: each anchor neuron's maximum Pearson
correlation over the other refit's neurons, and the same maximum under random maps of the other refit's
neurons (`headstab.neurons.rotations`), computed from the statistics alone, without a second pass over tokens.

The shortcut: Pearson's r is invariant to centring, and a linear map M of B's neurons commutes with it
(the mean of M b is M times the mean of b), so with the cross-covariance C_AB and B's layer covariance
Sigma_B that the pass accumulates,
    cov(a_i, (M b)_j) = (C_AB M^T)_ij,   var((M b)_j) = (M Sigma_B M^T)_jj,
    corr(a_i, (M b)_j) = (C_AB M^T)_ij / sqrt(var a_i * (M Sigma_B M^T)_jj),
exactly what a pass over the mapped activations would give (docs/beyond_the_paper.md). K draws cost
O(K L d^3) and no tokens.

Maxima are over the other refit's neurons of the same layer (`same_layer`) or of every layer (`cross_layer`,
statistics of scope cross_layer only; the null then maps each layer of B by its own map). A neuron of zero
variance (dead on the stream) has no correlation: NaN, never a maximum.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from headstab.neurons.rotations import draw_maps
from headstab.neurons.streamed import PairStatistics

__all__ = [
    "correlation_matrix",
    "direction_seed",
    "max_correlations",
    "null_max_correlations",
    "pair_universality",
    "rotated_correlation",
]


def _inverse_sd(variance: torch.Tensor) -> torch.Tensor:
    """1 / sqrt(variance), NaN where the variance is not positive (a constant neuron has no correlation)."""
    return torch.where(variance > 0, variance.clamp(min=torch.finfo(variance.dtype).tiny).rsqrt(), torch.nan)


def _nanmax(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Maximum over the last axis ignoring NaN (NaN where all are), and its index."""
    filled = torch.nan_to_num(values, nan=-torch.inf)
    best, index = filled.max(dim=-1)
    return torch.where(torch.isinf(best), torch.nan, best), index


def _moments(statistics: PairStatistics) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(comoment_a, comoment_b, cross), n_tokens times the covariances: Pearson's r is the same from them (the
    1 / n cancels), and no copy of the cross-covariance is made."""
    statistics.check_tokens()
    return statistics.comoment_a, statistics.comoment_b, statistics.cross


def _scales(statistics: PairStatistics) -> tuple[torch.Tensor, torch.Tensor]:
    """1 / sqrt of each neuron's sum of centred squares, [layer, d_mlp] for A and for B (NaN: dead)."""
    moment_a, moment_b, _ = _moments(statistics)
    return _inverse_sd(torch.diagonal(moment_a, dim1=-2, dim2=-1)), _inverse_sd(
        torch.diagonal(moment_b, dim1=-2, dim2=-1)
    )


def correlation_matrix(statistics: PairStatistics) -> torch.Tensor:
    """Pearson r of every anchor neuron with every other-refit neuron, float64 [layer, d_mlp, d_mlp]
    (same_layer) or [layer * d_mlp, layer * d_mlp] (cross_layer): a new tensor of the cross-covariance's size."""
    scale_a, scale_b = _scales(statistics)
    cross = _moments(statistics)[2]
    if statistics.scope == "cross_layer":
        return cross * scale_a.reshape(-1)[:, None] * scale_b.reshape(-1)[None, :]
    return cross * scale_a[:, :, None] * scale_b[:, None, :]


def max_correlations(statistics: PairStatistics) -> dict[str, np.ndarray]:
    """Each anchor neuron's maximum correlation over the other refit's neurons.

    Returns "same_layer" float64 [layer, d_mlp] and "same_layer_neuron" int64 [layer, d_mlp] (the other
    refit's best neuron in that layer); for cross_layer statistics also "cross_layer" [layer, d_mlp] and
    "cross_layer_layer", "cross_layer_neuron" int64 [layer, d_mlp] (where the best neuron sits). Cross-layer
    correlations are formed one anchor layer at a time ([d_mlp, layer * d_mlp] in memory).
    """
    n_layers, d_mlp = statistics.n_layers, statistics.d_mlp
    if statistics.scope == "same_layer":
        best, index = _nanmax(correlation_matrix(statistics))
        return {"same_layer": best.cpu().numpy(), "same_layer_neuron": index.cpu().numpy()}
    scale_a, scale_b = _scales(statistics)
    cross = _moments(statistics)[2]
    shape = (n_layers, d_mlp)
    same, every = (torch.empty(shape, dtype=torch.float64, device=cross.device) for _ in range(2))
    same_index, every_index = (torch.empty(shape, dtype=torch.long, device=cross.device) for _ in range(2))
    for layer in range(n_layers):
        rows = slice(layer * d_mlp, (layer + 1) * d_mlp)
        r = cross[rows] * scale_a[layer][:, None] * scale_b.reshape(-1)[None, :]  # [d_mlp, layer * d_mlp]
        same[layer], same_index[layer] = _nanmax(r[:, rows])
        every[layer], every_index[layer] = _nanmax(r)
    return {
        "same_layer": same.cpu().numpy(),
        "same_layer_neuron": same_index.cpu().numpy(),
        "cross_layer": every.cpu().numpy(),
        "cross_layer_layer": (every_index // d_mlp).cpu().numpy(),
        "cross_layer_neuron": (every_index % d_mlp).cpu().numpy(),
    }


def rotated_correlation(
    cross: torch.Tensor, variance_a: torch.Tensor, sigma_b: torch.Tensor, mapping: torch.Tensor
) -> torch.Tensor:
    """corr(a_i, (M b)_j) = (C_AB M^T)_ij / sqrt(var a_i (M Sigma_B M^T)_jj), batched over leading axes.

    cross: [..., anchor_neuron, d_mlp] covariances of anchor neurons with one layer of B; variance_a:
    [..., anchor_neuron]; sigma_b: [..., d_mlp, d_mlp] that layer's covariance; mapping: [..., d_mlp, d_mlp].
    Returns float64 [..., anchor_neuron, d_mlp].
    """
    mapped_cross = cross @ mapping.transpose(-2, -1)
    mapped_variance = ((mapping @ sigma_b) * mapping).sum(dim=-1)  # diag(M Sigma_B M^T) without the d x d product
    return mapped_cross * _inverse_sd(variance_a)[..., :, None] * _inverse_sd(mapped_variance)[..., None, :]


def null_max_correlations(
    statistics: PairStatistics, n_draws: int = 20, seed: int = 0, kind: str = "haar"
) -> dict[str, np.ndarray]:
    """Each anchor neuron's maximum correlation over B's neurons mapped by random maps of `kind` (`haar`
    rotations, or Gurnee et al.'s `gurnee` baseline), one map per layer and draw.

    Returns "same_layer" float64 [draw, layer, d_mlp] and, for cross_layer statistics, "cross_layer"
    [draw, layer, d_mlp] (the maximum over every layer of B, each layer mapped by its own map).
    """
    sigma_a, sigma_b, cross = _moments(statistics)  # n times Sigma_A, Sigma_B, C_AB: the same correlations
    n_layers, d_mlp = statistics.n_layers, statistics.d_mlp
    variance_a = torch.diagonal(sigma_a, dim1=-2, dim2=-1)  # [layer, d_mlp]
    device = cross.device
    same = torch.empty((n_draws, n_layers, d_mlp), dtype=torch.float64, device=device)
    every = torch.full_like(same, torch.nan) if statistics.scope == "cross_layer" else None
    for draw, maps in enumerate(draw_maps(kind, n_draws, n_layers, d_mlp, seed, device)):
        if every is None:
            same[draw] = _nanmax(rotated_correlation(cross, variance_a, sigma_b, maps))[0]
            continue
        rows = cross.reshape(n_layers * d_mlp, n_layers, d_mlp)
        for layer in range(n_layers):  # one layer of B at a time: [layer * d_mlp, d_mlp] in memory
            r = rotated_correlation(rows[:, layer], variance_a.reshape(-1), sigma_b[layer], maps[layer])
            best = _nanmax(r)[0].reshape(n_layers, d_mlp)
            same[draw, layer] = best[layer]
            every[draw] = torch.fmax(every[draw], best)  # fmax: a NaN (dead) block never hides a number
    out = {"same_layer": same.cpu().numpy()}
    if every is not None:
        out["cross_layer"] = every.cpu().numpy()
    return out


def direction_seed(seed: int, anchor: str, other: str) -> int:
    """The null's seed for anchor `anchor` against `other`: distinct for every ordered pair, fixed by `seed`."""
    pair = zlib.crc32(f"{anchor}\0{other}".encode())
    return int(np.random.SeedSequence([seed, pair]).generate_state(1)[0])


def pair_universality(
    statistics: PairStatistics, n_draws: int = 20, seed: int = 0, kind: str = "haar"
) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Both directions of one refit pair: {(anchor, other): {"max_<scope>": [layer, d_mlp], "null_<scope>":
    [layer, d_mlp] (the mean over n_draws null maxima)}} for each scope the statistics hold, the nulls drawn
    with `direction_seed(seed, anchor, other)`. Feed each key's arrays to `headstab.neurons.shares.stack_pairs`."""
    out = {}
    for one in (statistics, statistics.swapped()):
        found = max_correlations(one)
        null = null_max_correlations(one, n_draws, direction_seed(seed, one.anchor, one.other), kind)
        out[(one.anchor, one.other)] = {
            **{f"max_{scope}": found[scope] for scope in null},
            **{f"null_{scope}": draws.mean(axis=0) for scope, draws in null.items()},
        }
    return out
