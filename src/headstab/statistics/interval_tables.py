"""Stability against chance, as tables: intervals, the null, the initialisation baseline, effect sizes.

For one architecture and prompt set: bootstrap replicates (`headstab.statistics.bootstrap`) of the
trained refits' stability, of the prompt-permutation null and of the same refits at initialisation
(step 0), drawn with the same resamples, so differences are paired. Columns (docs/statistics.md):

- ci_low, ci_high: percentile interval of the statistic; n_boot resamples; resampled says what:
  "refits+prompts" (same-layer) or "refits" (cross-layer: its matches search every layer, and
  per-group tensors of all layer pairs would cost n_layers times the memory);
- null, null_ci_low, null_ci_high: the same statistic under the prompt-permutation null (same-layer);
- above_null (stability - null) with its interval, and effect_size: mean / s.d. (ddof 1) of the
  paired differences best_match - null_best_match over the pairs (and heads) averaged (Cohen's d_z);
- init, init_ci_low, init_ci_high: the statistic for the refits' step-0 weights (same-layer).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstab.statistics.bootstrap import Resamples, draw_resamples, percentile_interval, stability_replicates
from headstab.statistics.hypothesis import gap_replicates
from headstab.statistics.resampling import commonness_replicates

__all__ = [
    "GAP_INTERVAL_COLUMNS",
    "HEAD_INTERVAL_COLUMNS",
    "TABLE_NAMES",
    "LAYER_INTERVAL_COLUMNS",
    "POOLED_COLUMNS",
    "StabilityReplicates",
    "head_interval_table",
    "layer_interval_table",
    "pooled_layer_table",
    "replicates_by_kind",
]

INTERVAL = ["ci_low", "ci_high", "n_boot", "resampled"]
CHANCE = ["null", "null_ci_low", "null_ci_high", "above_null", "above_null_ci_low", "above_null_ci_high"]
CHANCE += ["effect_size", "init", "init_ci_low", "init_ci_high"]
HEAD_INTERVAL_COLUMNS = ["promptset", "scope", "anchor_seed", "layer", "head", *INTERVAL, *CHANCE]
LAYER_INTERVAL_COLUMNS = ["promptset", "scope", "anchor_seed", "layer", *INTERVAL, *CHANCE]
GAP_INTERVAL_COLUMNS = ["promptset", "statistic", "estimate", "ci_low", "ci_high", "n_boot"]
POOLED_COLUMNS = ["promptset", "scope", "layer", "stability", *INTERVAL, *CHANCE, "n_refits"]

StabilityReplicates = dict[str, dict[str, np.ndarray]]
# The tables of their own that rule stability_tables writes from `interval_tables` (after headstab.stability's).
TABLE_NAMES = ("layer_stability_pooled", "stability_gap_intervals")


def replicates_by_kind(
    resamples: Resamples,
    observed: np.ndarray,
    null: np.ndarray,
    group_sizes: np.ndarray,
    cross_layer_best: np.ndarray,
    init: np.ndarray | None = None,
    init_group_sizes: np.ndarray | None = None,
) -> StabilityReplicates:
    """Replicates of every kind, one set of resamples: "same_layer", "null", "cross_layer" and "init"
    (when given). observed, null, init: [group, seed_a, seed_b, layer, head_a, head_b];
    cross_layer_best: [seed_a, seed_b, layer, head] best matches over every layer's heads."""
    kinds = {
        "same_layer": stability_replicates(resamples, observed, group_sizes),
        "null": stability_replicates(resamples, null, group_sizes),
        "cross_layer": stability_replicates(resamples, best=cross_layer_best),
    }
    if init is not None:
        kinds["init"] = stability_replicates(
            resamples, init, group_sizes if init_group_sizes is None else init_group_sizes
        )
    return kinds


def _interval(replicates: np.ndarray, confidence: float) -> dict[str, np.ndarray]:
    low, high = percentile_interval(replicates, confidence)
    return {"ci_low": low, "ci_high": high}


def _effect_size(differences: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """mean / s.d. (ddof 1) over `axes`; NaN where the s.d. is 0 or undefined."""
    mean = differences.mean(axis=axes)
    n = np.prod([differences.shape[a] for a in axes])
    if n < 2:
        return np.full(mean.shape, np.nan)
    sd = differences.std(axis=axes, ddof=1)
    return np.divide(mean, sd, out=np.full(mean.shape, np.nan), where=sd > 0)


def _chance_columns(
    kinds: StabilityReplicates, scope: str, key: str, confidence: float, reduce_pairs
) -> dict[str, np.ndarray]:
    """null/above_null/effect_size/init columns for statistic `key` ("head" or "layer") of `scope`."""
    observed = kinds[scope]
    shape = observed[f"{key}_estimate"].shape
    if scope != "same_layer":
        return {column: np.full(shape, np.nan) for column in CHANCE}
    null = kinds["null"]
    columns = {"null": null[f"{key}_estimate"]}
    low, high = percentile_interval(null[key], confidence)
    columns.update(null_ci_low=low, null_ci_high=high)
    columns["above_null"] = observed[f"{key}_estimate"] - null[f"{key}_estimate"]
    low, high = percentile_interval(observed[key] - null[key], confidence)
    columns.update(above_null_ci_low=low, above_null_ci_high=high)
    columns["effect_size"] = reduce_pairs(observed["pair_best"] - null["pair_best"])
    if "init" in kinds:
        columns["init"] = kinds["init"][f"{key}_estimate"]
        low, high = percentile_interval(kinds["init"][key], confidence)
        columns.update(init_ci_low=low, init_ci_high=high)
    else:
        columns.update(
            init=np.full(shape, np.nan), init_ci_low=np.full(shape, np.nan), init_ci_high=np.full(shape, np.nan)
        )
    return columns


def _off_diagonal_pairs(pair_values: np.ndarray) -> np.ndarray:
    """[a, b, ...] -> [a, b - 1, ...]: each anchor's values against the other refits."""
    n = pair_values.shape[0]
    mask = ~np.eye(n, dtype=bool)
    return pair_values[mask].reshape(n, n - 1, *pair_values.shape[2:])


def _frame(
    base: dict[str, np.ndarray], columns: dict[str, np.ndarray], n_boot: int, scope: str, promptset: str
) -> pd.DataFrame:
    frame = pd.DataFrame({key: np.ravel(value) for key, value in {**base, **columns}.items()})
    frame.insert(0, "scope", scope)
    frame.insert(0, "promptset", promptset)
    frame["n_boot"] = n_boot
    frame["resampled"] = "refits+prompts" if scope == "same_layer" else "refits"
    return frame


def head_interval_table(
    kinds: StabilityReplicates, seeds: Sequence[int], promptset: str, confidence: float
) -> pd.DataFrame:
    """HEAD_INTERVAL_COLUMNS: one row per (scope, anchor_seed, layer, head), as head_stability.csv."""
    frames = []
    for scope in ("same_layer", "cross_layer"):
        estimate = kinds[scope]["head_estimate"]
        anchor, layer, head = np.indices(estimate.shape)
        base = {"anchor_seed": np.asarray(seeds)[anchor], "layer": layer, "head": head}
        columns = _interval(kinds[scope]["head"], confidence)
        columns.update(
            _chance_columns(kinds, scope, "head", confidence, lambda d: _effect_size(_off_diagonal_pairs(d), (1,)))
        )
        frames.append(_frame(base, columns, kinds[scope]["head"].shape[0], scope, promptset))
    return pd.concat(frames, ignore_index=True)[HEAD_INTERVAL_COLUMNS]


def _anchor_layer(kinds_scope: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return kinds_scope["head"].mean(axis=-1), kinds_scope["head_estimate"].mean(axis=-1)


def layer_interval_table(
    kinds: StabilityReplicates, seeds: Sequence[int], promptset: str, confidence: float
) -> pd.DataFrame:
    """LAYER_INTERVAL_COLUMNS: per (scope, anchor_seed, layer), the anchor's mean over heads, as layer_stability.csv."""
    per_anchor = {
        kind: {"layer": reps, "layer_estimate": estimate, "pair_best": values["pair_best"]}
        for kind, values in kinds.items()
        for reps, estimate in [_anchor_layer(values)]
    }
    frames = []
    for scope in ("same_layer", "cross_layer"):
        estimate = per_anchor[scope]["layer_estimate"]
        anchor, layer = np.indices(estimate.shape)
        base = {"anchor_seed": np.asarray(seeds)[anchor], "layer": layer}
        columns = _interval(per_anchor[scope]["layer"], confidence)
        columns.update(
            _chance_columns(
                per_anchor, scope, "layer", confidence, lambda d: _effect_size(_off_diagonal_pairs(d), (1, 3))
            )
        )
        frames.append(_frame(base, columns, per_anchor[scope]["layer"].shape[0], scope, promptset))
    return pd.concat(frames, ignore_index=True)[LAYER_INTERVAL_COLUMNS]


def pooled_layer_table(kinds: StabilityReplicates, promptset: str, confidence: float) -> pd.DataFrame:
    """POOLED_COLUMNS: per (scope, layer), stability averaged over ordered pairs of distinct refits and heads."""
    frames = []
    for scope in ("same_layer", "cross_layer"):
        estimate = kinds[scope]["layer_estimate"]
        n_seeds = kinds[scope]["pair_best"].shape[0]
        base = {"layer": np.arange(estimate.size), "stability": estimate}
        columns = _interval(kinds[scope]["layer"], confidence)

        def reduce(d: np.ndarray) -> np.ndarray:
            pairs = d[~np.eye(n_seeds, dtype=bool)]  # [pair, layer, head]
            return _effect_size(np.moveaxis(pairs, 1, 0).reshape(pairs.shape[1], -1), (1,))

        columns.update(_chance_columns(kinds, scope, "layer", confidence, reduce))
        frame = _frame(base, columns, kinds[scope]["layer"].shape[0], scope, promptset)
        frame["n_refits"] = n_seeds
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)[POOLED_COLUMNS]


def cross_layer_best(similarity: np.ndarray) -> np.ndarray:
    """[seed_a, seed_b, layer_a, head_a, layer_b, head_b] -> [seed_a, seed_b, layer, head]: best match over every layer's heads."""
    n_seeds, _, n_layers, n_heads = similarity.shape[:4]
    return similarity.reshape(n_seeds, n_seeds, n_layers, n_heads, -1).max(axis=-1)


def interval_tables(
    similarity: np.ndarray,
    grouped,
    promptset: str,
    *,
    n_boot: int,
    seed: int,
    confidence: float,
    init=None,
) -> dict[str, pd.DataFrame]:
    """Intervals, null and step-0 baseline of one prompt set: {"head", "layer", "pooled"} tables.

    similarity: the pair-similarity tensor (Eq. 2) of the refits `grouped.seeds`; grouped, init:
    `GroupedSimilarity` of the trained refits and of the same refits at step 0 (or None). The
    same-layer point estimates from `grouped` must equal those of `similarity` (the same caches): a
    mismatch raises instead of mixing two runs.
    """
    seeds = list(grouped.seeds)
    n_groups = len(grouped.group_sizes)
    if init is not None and list(init.seeds) != seeds:
        raise ValueError(f"the step-0 prompt groups cover seeds {list(init.seeds)}, the trained refits {seeds}")
    resamples = draw_resamples(n_boot, len(seeds), n_groups, seed)
    kinds = replicates_by_kind(
        resamples,
        grouped.observed,
        grouped.null,
        grouped.group_sizes,
        cross_layer_best(similarity),
        init=None if init is None else init.observed,
        init_group_sizes=None if init is None else init.group_sizes,
    )
    same_layer_blocks = np.moveaxis(np.diagonal(similarity, axis1=2, axis2=4), -1, 2)
    expected = same_layer_blocks.max(axis=-1).astype(np.float64)
    # Both are float32 dot products of unit vectors over a prompt's lower-triangle entries: rounding
    # grows like sqrt(entries) ulps.
    entries = int(np.max(grouped.lengths * (grouped.lengths + 1) // 2))
    tolerance = 16 * np.finfo(np.float32).eps * (np.sqrt(entries) + 4)
    if not np.allclose(kinds["same_layer"]["pair_best"], expected, rtol=0, atol=tolerance):
        worst = float(np.max(np.abs(kinds["same_layer"]["pair_best"] - expected)))
        raise ValueError(
            f"prompt set {promptset!r}: the prompt-group similarity and the pair-similarity tensor disagree "
            f"(best matches differ by up to {worst:.3g}); they were built from different caches. Rebuild both "
            "(snakemake --forcerun pair_similarity prompt_group_similarity)"
        )
    return {
        "head": head_interval_table(kinds, seeds, promptset, confidence),
        "layer": layer_interval_table(kinds, seeds, promptset, confidence),
        "pooled": pooled_layer_table(kinds, promptset, confidence),
        "gap": gap_interval_table(kinds, promptset, confidence),
        "commonness": commonness_interval_table(grouped, resamples, promptset, confidence),
    }


def commonness_interval_table(grouped, resamples: Resamples, promptset: str, confidence: float) -> pd.DataFrame:
    """Interval of every head's commonness (Eq. 10) over prompt-group resamples (the head belongs to its
    refit, so refits are not resampled): columns promptset, seed, layer, head, ci_low, ci_high, n_boot."""
    replicates = commonness_replicates(grouped.observed, grouped.group_sizes, resamples.prompt_counts)
    low, high = percentile_interval(replicates, confidence)
    seed, layer, head = np.indices(low.shape)
    return pd.DataFrame(
        {
            "promptset": promptset,
            "seed": np.asarray(grouped.seeds)[seed.ravel()],
            "layer": layer.ravel(),
            "head": head.ravel(),
            "ci_low": low.ravel(),
            "ci_high": high.ravel(),
            "n_boot": resamples.n_boot,
        }
    )


def gap_interval_table(kinds: StabilityReplicates, promptset: str, confidence: float) -> pd.DataFrame:
    """GAP_INTERVAL_COLUMNS: the stability gap of §4.6 (delta_s, s_max, s_min, r_max, r_min) of the pooled
    same-layer stability, with its interval (each replicate's own extreme layers)."""
    same = kinds["same_layer"]
    replicates = gap_replicates(same["layer"])
    estimate = gap_replicates(same["layer_estimate"])
    rows = []
    for statistic, values in replicates.items():
        low, high = percentile_interval(values, confidence)
        rows.append((promptset, statistic, float(estimate[statistic]), float(low), float(high), len(values)))
    return pd.DataFrame(rows, columns=GAP_INTERVAL_COLUMNS)
