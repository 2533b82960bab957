"""Centered kernel alignment between residual streams of refits (paper §4.7, Fig. 9/B.8).

The kernels, centering and CKA follow the reference code of Kornblith et al. (2019),
"Similarity of Neural Network Representations Revisited" (`gram_linear`, `gram_rbf`,
`center_gram`, `cka`), so that values are comparable with the paper's.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

Kernel = Literal["rbf", "linear"]


def token_activations(resid: np.ndarray, lengths: np.ndarray, first: int = 0) -> np.ndarray:
    """Stack the real (non-padding) token activations of all prompts, from position `first` on.

    resid: [prompt, pos, d_model] zero-padded activations (e.g. one layer of `resid_mid`).
    lengths: [prompt] number of real tokens of each prompt. first: 1 leaves out position 0 (a prepended
    BOS, whose residual stream is the same in every prompt, as it attends to itself alone).
    Returns [n_tokens, d_model], prompts in order, n_tokens = sum(max(lengths - first, 0)).
    """
    resid = np.asarray(resid)
    lengths = np.asarray(lengths)
    if resid.ndim != 3:
        raise ValueError(f"resid must be [prompt, pos, d_model], got shape {resid.shape}")
    if lengths.shape != (resid.shape[0],):
        raise ValueError(f"lengths must be [prompt] = ({resid.shape[0]},), got shape {lengths.shape}")
    if lengths.min(initial=1) < 0 or lengths.max(initial=0) > resid.shape[1]:
        raise ValueError(
            f"lengths must lie in [0, {resid.shape[1]}] (the padded length), got "
            f"min {lengths.min()} max {lengths.max()}"
        )
    positions = np.arange(resid.shape[1])[None, :]
    real = (positions < lengths[:, None]) & (positions >= first)  # [prompt, pos]
    return resid[real]


def gram_linear(x: np.ndarray) -> np.ndarray:
    """Linear kernel. x: [n, d]. Returns [n, n]."""
    x = np.asarray(x, dtype=np.float64)
    return x @ x.T


def gram_rbf(x: np.ndarray, threshold: float = 1.0) -> np.ndarray:
    """RBF kernel with bandwidth set from the median squared distance (Kornblith's `gram_rbf`).

    x: [n, d]. threshold: the bandwidth as a fraction of the median distance.
    Returns [n, n] = exp(-d_ij^2 / (2 threshold^2 median(d^2))); the median runs over the full
    n x n matrix of squared distances, diagonal included, exactly as the reference code.
    """
    if threshold <= 0:
        raise ValueError(f"threshold must be > 0, got {threshold}")
    x = np.asarray(x, dtype=np.float64)
    dot_products = x @ x.T
    sq_norms = np.diag(dot_products)
    sq_distances = -2 * dot_products + sq_norms[:, None] + sq_norms[None, :]
    sq_median_distance = np.median(sq_distances)
    if sq_median_distance <= 0:
        raise ValueError(
            "median squared distance between activations is 0 (most tokens are identical); "
            "the RBF bandwidth is undefined. Use kernel='linear' or more varied prompts."
        )
    return np.exp(-sq_distances / (2 * threshold**2 * sq_median_distance))


def center_gram(gram: np.ndarray, unbiased: bool = False) -> np.ndarray:
    """Center a symmetric Gram matrix (Kornblith's `center_gram`).

    gram: [n, n]. unbiased: use the U-statistic centering of Song et al. (2012), which gives the
    debiased HSIC estimator (needs n > 3). Returns a centered copy, [n, n].
    """
    if not np.allclose(gram, gram.T):
        raise ValueError("Gram matrix must be symmetric.")
    gram = np.array(gram, dtype=np.float64, copy=True)
    if unbiased:
        n = gram.shape[0]
        if n < 4:
            raise ValueError(f"the debiased estimator needs at least 4 tokens, got {n}")
        np.fill_diagonal(gram, 0)
        means = np.sum(gram, 0, dtype=np.float64) / (n - 2)
        means -= np.sum(means) / (2 * (n - 1))
        gram -= means[:, None]
        gram -= means[None, :]
        np.fill_diagonal(gram, 0)
    else:
        means = np.mean(gram, 0, dtype=np.float64)
        means -= np.mean(means) / 2
        gram -= means[:, None]
        gram -= means[None, :]
    return gram


def cka_from_grams(gram_x: np.ndarray, gram_y: np.ndarray, debiased: bool = False) -> float:
    """CKA between two [n, n] Gram matrices over the same n examples (Kornblith's `cka`)."""
    if gram_x.shape != gram_y.shape:
        raise ValueError(f"Gram matrices differ in shape: {gram_x.shape} vs {gram_y.shape}")
    gram_x = center_gram(gram_x, unbiased=debiased)
    gram_y = center_gram(gram_y, unbiased=debiased)
    return _cka_centered(gram_x, gram_y)


def _cka_centered(gram_x: np.ndarray, gram_y: np.ndarray) -> float:
    scaled_hsic = gram_x.ravel() @ gram_y.ravel()
    return float(scaled_hsic / (np.linalg.norm(gram_x) * np.linalg.norm(gram_y)))


def _check_pair(x: np.ndarray, y: np.ndarray) -> None:
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"activations must be [n_tokens, d], got {x.shape} and {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"activations cover different tokens: {x.shape[0]} vs {y.shape[0]} rows; both must "
            "come from the same prompts and tokenizer"
        )


def linear_cka(x: np.ndarray, y: np.ndarray, debiased: bool = False) -> float:
    """Linear CKA. x: [n_tokens, d_x], y: [n_tokens, d_y] (rows are the same tokens)."""
    _check_pair(x, y)
    return cka_from_grams(gram_linear(x), gram_linear(y), debiased=debiased)


def rbf_cka(x: np.ndarray, y: np.ndarray, threshold: float = 1.0, debiased: bool = False) -> float:
    """RBF CKA with bandwidth threshold x median distance. x: [n_tokens, d_x], y: [n_tokens, d_y]."""
    _check_pair(x, y)
    return cka_from_grams(gram_rbf(x, threshold), gram_rbf(y, threshold), debiased=debiased)


def _centered_gram(x: np.ndarray, kernel: Kernel, threshold: float, debiased: bool) -> np.ndarray:
    if kernel == "rbf":
        gram = gram_rbf(x, threshold)
    elif kernel == "linear":
        gram = gram_linear(x)
    else:
        raise ValueError(f"kernel must be 'rbf' or 'linear', got {kernel!r}")
    return center_gram(gram, unbiased=debiased)


def layerwise_cka(
    acts_a: np.ndarray,
    acts_b: np.ndarray,
    kernel: Kernel = "rbf",
    threshold: float = 1.0,
    debiased: bool = False,
) -> np.ndarray:
    """CKA per layer between two refits.

    acts_a, acts_b: [layer, n_tokens, d_model] token activations (see `token_activations`).
    Returns [layer].
    """
    acts_a, acts_b = np.asarray(acts_a), np.asarray(acts_b)
    if acts_a.ndim != 3 or acts_a.shape[:2] != acts_b.shape[:2]:
        raise ValueError(
            f"activations must both be [layer, n_tokens, d] with equal layer and token counts, "
            f"got {acts_a.shape} and {acts_b.shape}"
        )
    out = np.empty(acts_a.shape[0])
    for layer in range(acts_a.shape[0]):
        out[layer] = _cka_centered(
            _centered_gram(acts_a[layer], kernel, threshold, debiased),
            _centered_gram(acts_b[layer], kernel, threshold, debiased),
        )
    return out


def subsample_tokens(n_tokens: int, max_tokens: int | None) -> np.ndarray:
    """Evenly spaced token indices, at most max_tokens of n_tokens (all when None).

    Deterministic, so every refit keeps the same tokens. Returns [n_kept] int indices.
    """
    if max_tokens is None or n_tokens <= max_tokens:
        return np.arange(n_tokens)
    if max_tokens < 4:
        raise ValueError(f"max_tokens must be at least 4, got {max_tokens}")
    return np.unique(np.linspace(0, n_tokens - 1, max_tokens).round().astype(int))


def pairwise_layer_cka(
    acts_by_seed: Mapping[int, np.ndarray] | Sequence[np.ndarray],
    kernel: Kernel = "rbf",
    threshold: float = 1.0,
    debiased: bool = False,
    max_tokens: int | None = None,
) -> pd.DataFrame:
    """Layer-wise CKA for every pair of refits a < b.

    acts_by_seed: seed -> [layer, n_tokens, d_model] (a sequence is keyed 0, 1, ...); all refits
    must hold the same tokens in the same order. max_tokens: evenly subsample tokens to bound the
    n_tokens^2 Gram matrices (None keeps all).
    Returns a DataFrame with columns seed_a, seed_b, layer (0-based), cka.
    Each refit's centered Gram matrix is computed once per layer, so memory is
    n_seeds * n_tokens^2 * 8 bytes per layer.
    """
    if not isinstance(acts_by_seed, Mapping):
        acts_by_seed = dict(enumerate(acts_by_seed))
    seeds = sorted(acts_by_seed)
    if len(seeds) < 2:
        raise ValueError(f"need at least two refits for pairwise CKA, got seeds {seeds}")
    shapes = {s: np.shape(acts_by_seed[s]) for s in seeds}
    first = shapes[seeds[0]]
    for s in seeds:
        if len(shapes[s]) != 3 or shapes[s][:2] != first[:2]:
            raise ValueError(
                f"refit {s} activations have shape {shapes[s]}, refit {seeds[0]} has {first}; "
                "all must be [layer, n_tokens, d] over the same tokens"
            )
    keep = subsample_tokens(first[1], max_tokens)
    rows = []
    for layer in range(first[0]):
        grams = {
            s: _centered_gram(np.asarray(acts_by_seed[s][layer])[keep], kernel, threshold, debiased) for s in seeds
        }
        for a, b in itertools.combinations(seeds, 2):
            rows.append((a, b, layer, _cka_centered(grams[a], grams[b])))
    return pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"])


CKA_PAIRS = ("distinct", "ordered_with_self")


def layer_cka_summary(table: pd.DataFrame, pairs: str = "distinct") -> pd.DataFrame:
    """Per-layer mean and s.d. of residual-stream CKA over refit pairs (§4.7, Fig. 9 / B.8).

    table: columns seed_a, seed_b, layer, cka, one row per distinct pair a < b (`pairwise_layer_cka`).
    pairs: "distinct" averages the N(N-1)/2 distinct pairs; "ordered_with_self" averages the N^2
        ordered pairs including the N self-pairs (CKA 1), as the authors' code does: a true 0.70
        reads (N(N-1) 0.70 + N) / N^2, i.e. 0.76 at N = 5.
    Returns columns layer, cka_mean, cka_std (ddof 0), n_pairs (the number of values averaged).
    """
    if pairs not in CKA_PAIRS:
        raise ValueError(f"pairs must be one of {list(CKA_PAIRS)} (config key analysis.cka_pairs); got {pairs!r}")
    missing = [c for c in ("seed_a", "seed_b", "layer", "cka") if c not in table.columns]
    if missing:
        raise ValueError(f"CKA table lacks columns {missing}; has {list(table.columns)}")
    rows = []
    for layer, group in table.groupby("layer", sort=True):
        values = group["cka"].to_numpy(dtype=np.float64)
        if pairs == "ordered_with_self":
            n_refits = len(set(group["seed_a"]) | set(group["seed_b"]))
            values = np.concatenate([values, values, np.ones(n_refits)])
        rows.append((int(layer), float(values.mean()), float(values.std()), len(values)))
    return pd.DataFrame(rows, columns=["layer", "cka_mean", "cka_std", "n_pairs"])
