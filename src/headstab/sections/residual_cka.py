"""Residual-stream CKA between refits, per layer and prompt set (paper §4.7, Fig. 9 / B.8).

Every refit's real-token activations of one residual hook (config key analysis.cka_hook) are read
from its activation cache one layer at a time, the same evenly spaced tokens are kept in every
refit (analysis.cka_max_tokens), and CKA is taken between every pair of refits. The kernels and
CKA itself are `headstab.cka`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headstab.activations.reader import open_cache
from headstab.cka import layer_cka_summary, pairwise_layer_cka, subsample_tokens, token_activations
from headstab.statistics.resampling import pair_mean_interval

log = logging.getLogger(__name__)

CKA_COLUMNS = ["promptset", "seed_a", "seed_b", "layer", "cka"]


def kernel_label(kernel: str, debiased: bool) -> str:
    """How the figure names the kernel: 'RBF' or 'linear', plus ', debiased'."""
    label = "RBF" if kernel == "rbf" else "linear"
    return f"{label}, debiased" if debiased else label


def layer_tokens(
    caches: Mapping[int, Any], promptset: str, layer: int, keep: np.ndarray, hook: str
) -> dict[int, np.ndarray]:
    """seed -> [1, n_kept, d_model]: real-token activations of residual hook `hook` of one layer, the same
    tokens for every refit."""
    return {
        seed: token_activations(cache.resid(promptset, hook, layer=layer), cache.lengths(promptset))[keep][None]
        for seed, cache in caches.items()
    }


def promptset_cka(
    caches: Mapping[int, Any],
    promptset: str,
    hook: str,
    kernel: str,
    threshold: float,
    debiased: bool,
    max_tokens: int | None,
) -> pd.DataFrame:
    """CKA_COLUMNS of one prompt set. caches: seed -> open reader (`lengths`, `resid`, `n_layers`, `path`)."""
    lengths = {seed: cache.lengths(promptset) for seed, cache in caches.items()}
    first = next(iter(caches))
    for seed, cache in caches.items():
        if not np.array_equal(lengths[seed], lengths[first]):
            raise ValueError(
                f"caches {caches[first].path} and {cache.path} tokenize prompt set '{promptset}' "
                "differently; CKA needs the same tokens in every refit (rebuild the stale cache)"
            )
    keep = subsample_tokens(int(lengths[first].sum()), max_tokens)
    frames = []
    for layer in range(caches[first].n_layers):
        table = pairwise_layer_cka(
            layer_tokens(caches, promptset, layer, keep, hook), kernel=kernel, threshold=threshold, debiased=debiased
        )
        frames.append(table.assign(layer=layer))
    log.info("%s: %d of %d tokens per refit, %s", promptset, len(keep), int(lengths[first].sum()), hook)
    return pd.concat(frames, ignore_index=True).assign(promptset=promptset)[CKA_COLUMNS]


def residual_cka_table(
    cache_paths: Mapping[int, str | Path], promptsets: Sequence[str], **settings: Any
) -> pd.DataFrame:
    """CKA_COLUMNS of every prompt set: cache_paths maps seed -> activation cache; settings are
    `promptset_cka`'s hook, kernel, threshold, debiased and max_tokens."""

    with ExitStack() as stack:
        caches = {seed: stack.enter_context(open_cache(path)) for seed, path in cache_paths.items()}
        tables = [promptset_cka(caches, promptset, **settings) for promptset in promptsets]
    return pd.concat(tables, ignore_index=True)


def layer_cka_table(table: pd.DataFrame, pairs: str, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Per (promptset, layer): `headstab.cka.layer_cka_summary` (cka_mean, cka_std, n_pairs) with the
    bootstrap interval of cka_mean, refits resampled (`headstab.statistics.resampling.pair_mean_interval`).
    With pairs "ordered_with_self" the mean is (N(N-1) m + N) / N^2 of the distinct-pair mean m, and so is
    its interval."""

    frames = []
    for promptset, part in table.groupby("promptset", sort=False):
        summary = layer_cka_summary(part, pairs).merge(
            pair_mean_interval(part, "cka", n_boot, seed, confidence), on="layer"
        )
        if pairs == "ordered_with_self":
            n = len(set(part["seed_a"]) | set(part["seed_b"]))
            summary[["ci_low", "ci_high"]] = (n - 1) / n * summary[["ci_low", "ci_high"]] + 1 / n
        frames.append(summary.assign(promptset=promptset))
    out = pd.concat(frames, ignore_index=True)
    return out[["promptset", *[c for c in out.columns if c != "promptset"]]]
