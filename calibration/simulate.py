"""Simulated data with the dependence of the real data, for the calibration cases: symmetric pair blocks
(s[a, b] = s[b, a]), refit effects shared by every pair a refit enters, refit-specific layer offsets of mean zero
over refits, sharper and broader layers, prompt groups."""

from __future__ import annotations

import numpy as np

__all__ = [
    "anchor_layer_values",
    "clustered_rows",
    "depth_profile",
    "symmetric_pair_values",
]


def symmetric_pair_values(rng: np.random.Generator, refit_effect: np.ndarray, pair_sd: float) -> np.ndarray:
    """[refit, refit] values refit_effect[a] + refit_effect[b] + symmetric pair noise (s.d. pair_sd), diagonal 0."""
    n = len(refit_effect)
    noise = rng.normal(scale=pair_sd, size=(n, n))
    values = refit_effect[:, None] + refit_effect[None, :] + (noise + noise.T) / np.sqrt(2)
    np.fill_diagonal(values, 0.0)
    return values


def depth_profile(rng: np.random.Generator, n_layers: int, phi: float, sd: float) -> np.ndarray:
    """[layer] a stationary AR(1) over depth, s.d. sd: neighbouring layers alike (correlation phi), no trend."""
    values = np.empty(n_layers)
    values[0] = rng.normal(scale=sd)
    innovation = sd * np.sqrt(1.0 - phi**2)
    for layer in range(1, n_layers):
        values[layer] = phi * values[layer - 1] + rng.normal(scale=innovation)
    return values


def anchor_layer_values(
    rng: np.random.Generator, layer_mean: np.ndarray, refit_offsets: np.ndarray, pair_sd: float
) -> np.ndarray:
    """[anchor, layer] per-anchor values of a pair statistic: per layer l, the mean over the anchor's N - 1
    pair refits of symmetric pair values layer_mean[l] + offset[a, l] + offset[b, l] + pair noise.

    refit_offsets: [refit, layer] refit-specific layer offsets (some refit's layer is sharper), shared by every
    pair the refit enters, so the anchors' values share their partners.
    """
    n_refits, n_layers = refit_offsets.shape
    values = np.empty((n_refits, n_layers))
    for layer in range(n_layers):
        pairs = symmetric_pair_values(rng, refit_offsets[:, layer], pair_sd)
        values[:, layer] = layer_mean[layer] + pairs.sum(axis=1) / (n_refits - 1)
    return values


def clustered_rows(
    rng: np.random.Generator, n_refits: int, rows_per_refit: int, between: np.ndarray, within: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows that belong to refits: ([row, variable] values, [row] refit index).

    Each row of refit a is u_a + e with u_a ~ N(0, between) shared by the refit's rows (its heads) and
    e ~ N(0, within) its own; between, within: [variable, variable] covariances. The population covariance of
    a row is between + within.
    """
    n_var = len(between)
    shared = rng.multivariate_normal(np.zeros(n_var), between, size=n_refits)
    own = rng.multivariate_normal(np.zeros(n_var), within, size=(n_refits, rows_per_refit))
    values = (shared[:, None, :] + own).reshape(-1, n_var)
    return values, np.repeat(np.arange(n_refits), rows_per_refit)
