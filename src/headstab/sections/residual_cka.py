"""Residual-stream CKA between refits, per layer and prompt set (paper §4.7, Fig. 9 / B.8).

Every refit's real-token activations of one residual hook (config key analysis.cka_hook) are read
from its activation cache one layer at a time, the same evenly spaced tokens are kept in every
refit (analysis.cka_max_tokens), and CKA is taken between every pair of refits. The kernels and
CKA itself are `headstab.cka`.

Two controls sit beside each value (docs/statistics.md, "Residual CKA against chance"):
- `init_cka`, the same CKA between the same refits at step 0 (independently initialised, untrained): the
  level the architecture and the prompts give with no learning;
- positions "no_bos", the same CKA without the BOS rows: a prepended BOS attends to itself alone, so its
  residual stream is the same in every prompt, n_prompts identical rows that every refit shares.
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
from headstab.statistics.calibration import calibration_label
from headstab.statistics.resampling import pair_mean_interval

log = logging.getLogger(__name__)

CKA_COLUMNS = ["promptset", "positions", "seed_a", "seed_b", "layer", "cka"]
POSITIONS = ("all", "no_bos")
INIT_COLUMNS = ["init_cka_mean", "init_ci_low", "init_ci_high"]


def kernel_label(kernel: str, debiased: bool) -> str:
    """How the figure names the kernel: 'RBF' or 'linear', plus ', debiased'."""
    label = "RBF" if kernel == "rbf" else "linear"
    return f"{label}, debiased" if debiased else label


def layer_tokens(
    caches: Mapping[int, Any], promptset: str, layer: int, keep: np.ndarray, hook: str, first: int = 0
) -> dict[int, np.ndarray]:
    """seed -> [1, n_kept, d_model]: real-token activations (from position `first` on) of residual hook `hook`
    of one layer, the same tokens for every refit."""
    return {
        seed: token_activations(cache.resid(promptset, hook, layer=layer), cache.lengths(promptset), first)[keep][None]
        for seed, cache in caches.items()
    }


def _first_position(caches: Mapping[int, Any], positions: str) -> int:
    """1 when `positions` is "no_bos" and the caches prepended a BOS (cache attribute prepend_bos), else 0."""
    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {list(POSITIONS)}, got {positions!r}")
    prepended = {bool(cache.attrs.get("prepend_bos", False)) for cache in caches.values()}
    if len(prepended) > 1:
        raise ValueError("the caches disagree in prepend_bos (cache.prepend_bos); rebuild the stale caches")
    return int(positions == "no_bos" and prepended == {True})


def promptset_cka(
    caches: Mapping[int, Any],
    promptset: str,
    hook: str,
    kernel: str,
    threshold: float,
    debiased: bool,
    max_tokens: int | None,
    positions: str = "all",
) -> pd.DataFrame:
    """CKA_COLUMNS of one prompt set. caches: seed -> open reader (`lengths`, `resid`, `n_layers`, `path`, `attrs`).
    positions: "all" real tokens, or "no_bos" without position 0 when the caches prepended a BOS (else the same
    tokens as "all")."""
    lengths = {seed: cache.lengths(promptset) for seed, cache in caches.items()}
    first = next(iter(caches))
    for seed, cache in caches.items():
        if not np.array_equal(lengths[seed], lengths[first]):
            raise ValueError(
                f"caches {caches[first].path} and {cache.path} tokenize prompt set '{promptset}' "
                "differently; CKA needs the same tokens in every refit (rebuild the stale cache)"
            )
    start = _first_position(caches, positions)
    n_tokens = int(np.maximum(lengths[first] - start, 0).sum())
    keep = subsample_tokens(n_tokens, max_tokens)
    frames = []
    for layer in range(caches[first].n_layers):
        table = pairwise_layer_cka(
            layer_tokens(caches, promptset, layer, keep, hook, start),
            kernel=kernel,
            threshold=threshold,
            debiased=debiased,
        )
        frames.append(table.assign(layer=layer))
    log.info("%s: %d of %d tokens per refit, %s, positions %s", promptset, len(keep), n_tokens, hook, positions)
    return pd.concat(frames, ignore_index=True).assign(promptset=promptset, positions=positions)[CKA_COLUMNS]


def residual_cka_table(
    cache_paths: Mapping[int, str | Path],
    promptsets: Sequence[str],
    init_paths: Mapping[int, str | Path] | None = None,
    positions: Sequence[str] = POSITIONS,
    **settings: Any,
) -> pd.DataFrame:
    """CKA_COLUMNS + init_cka of every prompt set and positions variant: cache_paths maps seed -> activation
    cache; init_paths seed -> the same refit's step-0 cache with the residual hook (None: init_cka NaN);
    settings are `promptset_cka`'s hook, kernel, threshold, debiased and max_tokens."""
    if init_paths is not None and sorted(map(str, init_paths)) != sorted(map(str, cache_paths)):
        raise ValueError(f"step-0 caches of refits {sorted(init_paths)} do not match the refits {sorted(cache_paths)}")
    with ExitStack() as stack:
        caches = {seed: stack.enter_context(open_cache(path)) for seed, path in cache_paths.items()}
        init = (
            None if init_paths is None else {seed: stack.enter_context(open_cache(init_paths[seed])) for seed in caches}
        )
        tables = []
        for promptset in promptsets:
            for variant in positions:
                table = promptset_cka(caches, promptset, positions=variant, **settings)
                tables.append(
                    table.assign(init_cka=np.nan if init is None else _init_cka(init, caches, table, variant, settings))
                )
    return pd.concat(tables, ignore_index=True)


def _init_cka(
    init: Mapping[int, Any], caches: Mapping[int, Any], table: pd.DataFrame, positions: str, settings: Mapping[str, Any]
) -> np.ndarray:
    """The step-0 CKA of each row of `table` (one prompt set and positions variant), on the same tokens."""
    promptset = str(table["promptset"].iloc[0])
    for seed, cache in init.items():
        if not np.array_equal(cache.lengths(promptset), caches[seed].lengths(promptset)):
            raise ValueError(
                f"step-0 cache {cache.path} tokenizes prompt set '{promptset}' unlike {caches[seed].path}; "
                "rebuild the stale cache"
            )
    step0 = promptset_cka(init, promptset, positions=positions, **settings)
    keys = ["seed_a", "seed_b", "layer"]
    return table[keys].merge(step0[[*keys, "cka"]], on=keys, how="left")["cka"].to_numpy()


def layer_cka_table(table: pd.DataFrame, pairs: str, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Per (promptset, positions, layer): `headstab.cka.layer_cka_summary` (cka_mean, cka_std, n_pairs) with the
    bootstrap interval of cka_mean, refits resampled (`headstab.statistics.resampling.pair_mean_interval`), and the
    same mean and interval of init_cka (INIT_COLUMNS; NaN without step-0 caches) from the same resamples.
    With pairs "ordered_with_self" the mean is (N(N-1) m + N) / N^2 of the distinct-pair mean m, and so is
    its interval. `calibration` says whether both intervals are calibrated at the N refits
    (`headstab.statistics.calibration`). A table without positions (or init_cka) reads as positions "all" (init
    NaN)."""
    if "positions" not in table.columns:
        table = table.assign(positions="all")
    frames = []
    for (promptset, positions), part in table.groupby(["promptset", "positions"], sort=False):
        summary = _pair_summary(part, "cka", pairs, n_boot, seed, confidence)
        if "init_cka" in part.columns and part["init_cka"].notna().all():
            init = _pair_summary(part, "init_cka", pairs, n_boot, seed, confidence)
            summary[INIT_COLUMNS] = init[["cka_mean", "ci_low", "ci_high"]].to_numpy()
        else:
            summary[INIT_COLUMNS] = np.nan
        n_refits = len(set(part["seed_a"]) | set(part["seed_b"]))
        summary["calibration"] = calibration_label("pair_refit_bootstrap_residual_cka", n_refits)
        frames.append(summary.assign(promptset=promptset, positions=positions))
    out = pd.concat(frames, ignore_index=True)
    return out[["promptset", "positions", *[c for c in out.columns if c not in ("promptset", "positions")]]]


def _pair_summary(
    part: pd.DataFrame, value: str, pairs: str, n_boot: int, seed: int, confidence: float
) -> pd.DataFrame:
    """layer, cka_mean, cka_std, n_pairs, ci_low, ci_high, n_boot of column `value` over one prompt set's pairs."""
    values = part[["seed_a", "seed_b", "layer", value]].rename(columns={value: "cka"})
    summary = layer_cka_summary(values, pairs).merge(
        pair_mean_interval(values, "cka", n_boot, seed, confidence), on="layer"
    )
    if pairs == "ordered_with_self":
        n = len(set(part["seed_a"]) | set(part["seed_b"]))
        summary[["ci_low", "ci_high"]] = (n - 1) / n * summary[["ci_low", "ci_high"]] + 1 / n
    return summary
