"""Simulated data with the dependence of the real data, for the calibration cases: symmetric pair blocks
(s[a, b] = s[b, a]), refit effects shared by every pair a refit enters, refit-specific layer offsets of mean zero
over refits, sharper and broader layers, prompt groups."""

from __future__ import annotations

import numpy as np

__all__ = ["symmetric_pair_values"]


def symmetric_pair_values(rng: np.random.Generator, refit_effect: np.ndarray, pair_sd: float) -> np.ndarray:
    """[refit, refit] values refit_effect[a] + refit_effect[b] + symmetric pair noise (s.d. pair_sd), diagonal 0."""
    n = len(refit_effect)
    noise = rng.normal(scale=pair_sd, size=(n, n))
    values = refit_effect[:, None] + refit_effect[None, :] + (noise + noise.T) / np.sqrt(2)
    np.fill_diagonal(values, 0.0)
    return values
