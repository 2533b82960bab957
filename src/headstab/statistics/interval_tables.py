"""Stability against chance, as tables: intervals, the null, the initialisation baseline, effect sizes.

For one architecture and prompt set: bootstrap replicates (`headstab.statistics.bootstrap`) of the
trained refits' stability, of the prompt-permutation null and of the same refits at initialisation
(step 0), drawn with the same resamples, so differences are paired. Columns (docs/statistics.md):

- ci_low, ci_high: percentile interval of the statistic; n_boot resamples; resampled says what:
  "refits+prompts" (same-layer) or "refits" (cross-layer: its matches search every layer, and
  per-group tensors of all layer pairs would cost n_layers times the memory);
- null, null_ci_low, null_ci_high: the same statistic under the prompt-permutation null (same-layer, and
  cross-layer where the pair-similarity file holds its null: `headstab.statistics.cross_layer_null`);
- above_null (stability - null) with its interval, and effect_size: mean / s.d. (ddof 1) of the
  paired differences best_match - null_best_match over the pairs (and heads) averaged (Cohen's d_z),
  NaN where that s.d. is within the rounding of the inputs' dtype (no spread to measure against);
  descriptive only: those pairs and heads are dependent units, so it is no test statistic;
- init, init_ci_low, init_ci_high: the statistic for the refits' step-0 weights (same-layer);
- one_to_one_*: the interval, null, above_null and step-0 value of one-to-one stability (same-layer;
  `headstab.matching`), its assignment solved once per pair and layer on the full data of each kind;
- entropy and the content variant's columns (`headstab.statistics.controls`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstab.matching import one_to_one_assignment
from headstab.similarity.prompt_groups import check_matches_pair_tensor
from headstab.statistics import cross_layer_null
from headstab.statistics.bootstrap import (
    Resamples,
    draw_resamples,
    one_to_one_replicates,
    percentile_interval,
    stability_replicates,
)
from headstab.statistics.controls import (
    COMMONNESS_NULL_COLUMNS,
    CONTENT_COLUMNS,
    attach_content_share,
    commonness_null_columns,
    content_columns,
    entropy_column,
    gap_control_rows,
)
from headstab.statistics.effect_size import effect_size, similarity_rounding
from headstab.statistics.hypothesis import gap_replicates
from headstab.statistics.interval_labels import LABEL_COLUMNS, gap_labels, interval_labels
from headstab.statistics.jackknife import JACKKNIFE_COLUMNS, jackknife_columns, jackknife_scope
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
CHANCE += ["effect_size", "init", "init_ci_low", "init_ci_high", *cross_layer_null.TEST_COLUMNS]
NULL_KINDS = {"same_layer": "null", "cross_layer": "cross_layer_null"}
# One-to-one stability's interval and chance columns (its estimate is head/layer_stability's stability_one_to_one).
ONE_TO_ONE = ["ci_low", "ci_high", "null", "null_ci_low", "null_ci_high", "above_null", "above_null_ci_low"]
ONE_TO_ONE = [f"one_to_one_{name}" for name in (*ONE_TO_ONE, "above_null_ci_high", "init")]
CONTROLS = ["entropy", *CONTENT_COLUMNS, *JACKKNIFE_COLUMNS, *LABEL_COLUMNS]
HEAD_INTERVAL_COLUMNS = ["promptset", "scope", "anchor_seed", "layer", "head", *INTERVAL, *CHANCE, *ONE_TO_ONE]
HEAD_INTERVAL_COLUMNS += CONTROLS
LAYER_INTERVAL_COLUMNS = ["promptset", "scope", "anchor_seed", "layer", *INTERVAL, *CHANCE, *ONE_TO_ONE, *CONTROLS]
GAP_INTERVAL_COLUMNS = ["promptset", "statistic", "estimate", "ci_low", "ci_high", "n_boot", "p_value"]
GAP_LABELLED_COLUMNS = [*GAP_INTERVAL_COLUMNS, "ci_calibration", "p_calibration"]
POOLED_COLUMNS = ["promptset", "scope", "layer", "stability", *INTERVAL, *CHANCE, "n_refits"]
POOLED_COLUMNS += ["stability_one_to_one", *ONE_TO_ONE, *CONTROLS]
COMMONNESS_INTERVAL_COLUMNS = ["promptset", "seed", "layer", "head", "ci_low", "ci_high", "n_boot"]
COMMONNESS_INTERVAL_COLUMNS += COMMONNESS_NULL_COLUMNS

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
    assignments: dict[str, np.ndarray] | None = None,
    content: tuple[np.ndarray, np.ndarray] | None = None,
) -> StabilityReplicates:
    """Replicates of every kind, one set of resamples: "same_layer", "null", "cross_layer", "init",
    "content" and "content_null" (when given). observed, null, init, content (observed, null): [group,
    seed_a, seed_b, layer, head_a, head_b]; cross_layer_best: [seed_a, seed_b, layer, head] best matches
    over every layer's heads. assignments: one-to-one assignments [seed_a, seed_b, layer, head_a] keyed
    "one_to_one" (of observed), "one_to_one_null" and "one_to_one_init"; each given one adds that kind
    (`one_to_one_replicates`)."""
    init_sizes = group_sizes if init_group_sizes is None else init_group_sizes
    kinds = {
        "same_layer": stability_replicates(resamples, observed, group_sizes),
        "null": stability_replicates(resamples, null, group_sizes),
        "cross_layer": stability_replicates(resamples, best=cross_layer_best),
    }
    if init is not None:
        kinds["init"] = stability_replicates(resamples, init, init_sizes)
    sources = {"one_to_one": (observed, group_sizes), "one_to_one_null": (null, group_sizes)}
    if init is not None:
        sources["one_to_one_init"] = (init, init_sizes)
    for kind, assignment in (assignments or {}).items():
        values, sizes = sources[kind]
        kinds[kind] = one_to_one_replicates(resamples, values, sizes, assignment)
    if content is not None:
        kinds["content"] = stability_replicates(resamples, content[0], group_sizes)
        kinds["content_null"] = stability_replicates(resamples, content[1], group_sizes)
    return kinds


def _interval(replicates: np.ndarray, confidence: float) -> dict[str, np.ndarray]:
    low, high = percentile_interval(replicates, confidence)
    return {"ci_low": low, "ci_high": high}


def _chance_columns(
    kinds: StabilityReplicates, scope: str, key: str, confidence: float, reduce_pairs, eps: float
) -> dict[str, np.ndarray]:
    """null/above_null/effect_size/init columns for statistic `key` ("head" or "layer") of `scope`;
    reduce_pairs(values [seed_a, seed_b, layer, head]) -> the pairs' values on the axes effect_size reduces
    (None: no effect_size, NaN)."""
    observed = kinds[scope]
    shape = observed[f"{key}_estimate"].shape
    if NULL_KINDS[scope] not in kinds:
        return {column: np.full(shape, np.nan) for column in CHANCE}
    null = kinds[NULL_KINDS[scope]]
    columns = {"null": null[f"{key}_estimate"]}
    low, high = percentile_interval(null[key], confidence)
    columns.update(null_ci_low=low, null_ci_high=high)
    columns["above_null"] = observed[f"{key}_estimate"] - null[f"{key}_estimate"]
    low, high = percentile_interval(observed[key] - null[key], confidence)
    columns.update(above_null_ci_low=low, above_null_ci_high=high)
    if reduce_pairs is None:
        columns["effect_size"] = np.full(shape, np.nan)
    else:
        differences = observed["pair_best"] - null["pair_best"]
        magnitudes = np.maximum(np.abs(observed["pair_best"]), np.abs(null["pair_best"]))
        pairs, axes = reduce_pairs(differences)
        columns["effect_size"] = effect_size(pairs, reduce_pairs(magnitudes)[0], axes, eps)
    columns.update(cross_layer_null.cross_layer_test_columns(null, shape))
    if "init" in kinds and scope == "same_layer":
        columns["init"] = kinds["init"][f"{key}_estimate"]
        low, high = percentile_interval(kinds["init"][key], confidence)
        columns.update(init_ci_low=low, init_ci_high=high)
    else:
        columns.update(
            init=np.full(shape, np.nan), init_ci_low=np.full(shape, np.nan), init_ci_high=np.full(shape, np.nan)
        )
    return columns


def _one_to_one_columns(kinds: StabilityReplicates, scope: str, key: str, confidence: float) -> dict[str, np.ndarray]:
    """ONE_TO_ONE columns of statistic `key` ("head" or "layer"): NaN outside same-layer or without the kinds."""
    shape = kinds[scope][f"{key}_estimate"].shape
    if scope != "same_layer" or "one_to_one" not in kinds:
        return {column: np.full(shape, np.nan) for column in ONE_TO_ONE}
    sub = {"same_layer": kinds["one_to_one"], "null": kinds["one_to_one_null"]}
    if "one_to_one_init" in kinds:
        sub["init"] = kinds["one_to_one_init"]
    columns = {**_interval(sub["same_layer"][key], confidence)}
    columns.update(_chance_columns(sub, "same_layer", key, confidence, None, np.nan))  # no one-to-one effect_size
    return {column: columns[column.removeprefix("one_to_one_")] for column in ONE_TO_ONE}


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
    kinds: StabilityReplicates,
    seeds: Sequence[int],
    promptset: str,
    confidence: float,
    eps: float,
    entropy: np.ndarray | None = None,
    jackknife: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """HEAD_INTERVAL_COLUMNS: one row per (scope, anchor_seed, layer, head), as head_stability.csv; eps: the
    machine epsilon of the similarities' dtype (effect_size); entropy [seed, layer, head] of the prompt groups
    (NaN without); jackknife: the "head" level of `jackknife_columns` (NaN without); calibration labels at N."""
    frames = []
    for scope in ("same_layer", "cross_layer"):
        estimate = kinds[scope]["head_estimate"]
        anchor, layer, head = np.indices(estimate.shape)
        base = {"anchor_seed": np.asarray(seeds)[anchor], "layer": layer, "head": head}
        columns = _interval(kinds[scope]["head"], confidence)
        columns.update(_chance_columns(kinds, scope, "head", confidence, lambda d: (_off_diagonal_pairs(d), (1,)), eps))
        columns.update(_one_to_one_columns(kinds, scope, "head", confidence))
        columns["entropy"] = entropy_column(entropy, estimate.shape)
        columns.update(content_columns(kinds, scope, "head", confidence))
        columns.update(jackknife_scope(jackknife, scope, estimate.shape))
        frames.append(_frame(base, columns, kinds[scope]["head"].shape[0], scope, promptset))
    return interval_labels(pd.concat(frames, ignore_index=True), "head", len(seeds))[HEAD_INTERVAL_COLUMNS]


def _anchor_layer(kinds_scope: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return kinds_scope["head"].mean(axis=-1), kinds_scope["head_estimate"].mean(axis=-1)


def layer_interval_table(
    kinds: StabilityReplicates,
    seeds: Sequence[int],
    promptset: str,
    confidence: float,
    eps: float,
    entropy: np.ndarray | None = None,
    jackknife: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """LAYER_INTERVAL_COLUMNS: per (scope, anchor_seed, layer), the anchor's mean over heads, as
    layer_stability.csv (entropy: the mean over the layer's heads; jackknife: the "layer" level)."""
    per_anchor = {
        kind: {**values, "layer": reps, "layer_estimate": estimate}
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
            _chance_columns(per_anchor, scope, "layer", confidence, lambda d: (_off_diagonal_pairs(d), (1, 3)), eps)
        )
        columns.update(_one_to_one_columns(per_anchor, scope, "layer", confidence))
        columns["entropy"] = entropy_column(entropy, estimate.shape, (2,))
        columns.update(content_columns(per_anchor, scope, "layer", confidence))
        columns.update(jackknife_scope(jackknife, scope, estimate.shape))
        frames.append(_frame(base, columns, per_anchor[scope]["layer"].shape[0], scope, promptset))
    return interval_labels(pd.concat(frames, ignore_index=True), "layer", len(seeds))[LAYER_INTERVAL_COLUMNS]


def pooled_layer_table(
    kinds: StabilityReplicates,
    promptset: str,
    confidence: float,
    eps: float,
    entropy: np.ndarray | None = None,
    jackknife: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """POOLED_COLUMNS: per (scope, layer), stability averaged over ordered pairs of distinct refits and heads
    (entropy: over refits and heads; jackknife: the "pooled" level)."""
    frames = []
    for scope in ("same_layer", "cross_layer"):
        estimate = kinds[scope]["layer_estimate"]
        n_seeds = kinds[scope]["pair_best"].shape[0]
        base = {"layer": np.arange(estimate.size), "stability": estimate}
        columns = _interval(kinds[scope]["layer"], confidence)

        def reduce(d: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
            pairs = d[~np.eye(n_seeds, dtype=bool)]  # [pair, layer, head]
            return np.moveaxis(pairs, 1, 0).reshape(pairs.shape[1], -1), (1,)

        columns.update(_chance_columns(kinds, scope, "layer", confidence, reduce, eps))
        one_to_one = kinds["one_to_one"]["layer_estimate"] if "one_to_one" in kinds else np.nan
        columns["stability_one_to_one"] = np.broadcast_to(
            one_to_one if scope == "same_layer" else np.nan, estimate.shape
        )
        columns.update(_one_to_one_columns(kinds, scope, "layer", confidence))
        columns["entropy"] = entropy_column(entropy, estimate.shape, (0, 2))
        columns.update(content_columns(kinds, scope, "layer", confidence))
        columns.update(jackknife_scope(jackknife, scope, estimate.shape))
        frame = _frame(base, columns, kinds[scope]["layer"].shape[0], scope, promptset)
        frame["n_refits"] = n_seeds
        frames.append(frame)
    return interval_labels(pd.concat(frames, ignore_index=True), "pooled", n_seeds)[POOLED_COLUMNS]


def interval_tables(
    similarity: np.ndarray,
    grouped,
    promptset: str,
    *,
    n_boot: int,
    seed: int,
    confidence: float,
    init=None,
    permutations: int = 1000,
    null_similarity=None,
) -> dict[str, pd.DataFrame]:
    """Intervals, null, step-0 baseline and controls of one prompt set: {"head", "layer", "pooled", "gap",
    "commonness"} tables.

    similarity: the pair-similarity tensor (Eq. 2) of the refits `grouped.seeds`; grouped, init:
    `GroupedSimilarity` of the trained refits and of the same refits at step 0 (or None). The
    same-layer point estimates from `grouped` must equal those of `similarity` (the same caches): a
    mismatch raises instead of mixing two runs. permutations: of the sign-flip test of the cross-layer null;
    null_similarity: (S0, partners) of `read_pair_similarity_null`, or None.
    """
    seeds = list(grouped.seeds)
    n_groups = len(grouped.group_sizes)
    if init is not None and list(init.seeds) != seeds:
        raise ValueError(f"the step-0 prompt groups cover seeds {list(init.seeds)}, the trained refits {seeds}")
    resamples = draw_resamples(n_boot, len(seeds), n_groups, seed)
    same_layer_blocks = np.moveaxis(np.diagonal(similarity, axis1=2, axis2=4), -1, 2)
    # The observed assignment is the pair table's (solved on the pair-similarity tensor); the null's and
    # step 0's are solved on their own full-data similarity, as their best matches are taken from it.
    assignments = {
        "one_to_one": one_to_one_assignment(same_layer_blocks),
        "one_to_one_null": one_to_one_assignment(grouped.mean("null")),
    }
    if init is not None:
        assignments["one_to_one_init"] = one_to_one_assignment(init.mean())
    kinds = replicates_by_kind(
        resamples,
        grouped.observed,
        grouped.null,
        grouped.group_sizes,
        cross_layer_null.cross_layer_best(similarity),
        init=None if init is None else init.observed,
        init_group_sizes=None if init is None else init.group_sizes,
        assignments=assignments,
        content=(grouped.content_observed, grouped.content_null) if grouped.has_content else None,
    )
    attach_content_share(kinds, grouped.content_share)
    cross_layer_null.add_cross_layer_null(kinds, resamples, null_similarity, grouped, permutations, seed)
    check_matches_pair_tensor(kinds["same_layer"]["pair_best"], similarity, grouped.lengths, promptset)
    gap = gap_interval_table(kinds, promptset, confidence)
    gap = pd.concat(
        [gap, pd.DataFrame(gap_control_rows(kinds, promptset, confidence), columns=gap.columns)],
        ignore_index=True,
    )
    eps = similarity_rounding(np.result_type(grouped.observed, grouped.null), grouped.lengths)  # for effect_size
    best = {"observed": kinds["same_layer"]["pair_best"], "null": kinds["null"]["pair_best"]}
    jackknife = jackknife_columns(grouped, best, confidence)
    return {
        "head": head_interval_table(kinds, seeds, promptset, confidence, eps, grouped.entropy, jackknife["head"]),
        "layer": layer_interval_table(kinds, seeds, promptset, confidence, eps, grouped.entropy, jackknife["layer"]),
        "pooled": pooled_layer_table(kinds, promptset, confidence, eps, grouped.entropy, jackknife["pooled"]),
        "gap": gap_labels(gap, len(seeds))[GAP_LABELLED_COLUMNS],
        "commonness": commonness_interval_table(grouped, resamples, promptset, confidence),
    }


def commonness_interval_table(grouped, resamples: Resamples, promptset: str, confidence: float) -> pd.DataFrame:
    """COMMONNESS_INTERVAL_COLUMNS: the interval of every head's commonness (Eq. 10) over prompt-group
    resamples (the head belongs to its refit, so refits are not resampled), and commonness under the
    prompt-permutation null with the same resamples (`headstab.statistics.controls`)."""
    replicates = commonness_replicates(grouped.observed, grouped.group_sizes, resamples.prompt_counts)
    low, high = percentile_interval(replicates, confidence)
    seed, layer, head = np.indices(low.shape)
    nulls = commonness_null_columns(grouped, resamples.prompt_counts, confidence)
    table = pd.DataFrame(
        {
            "promptset": promptset,
            "seed": np.asarray(grouped.seeds)[seed.ravel()],
            "layer": layer.ravel(),
            "head": head.ravel(),
            "ci_low": low.ravel(),
            "ci_high": high.ravel(),
            "n_boot": resamples.n_boot,
            **{name: np.ravel(values) for name, values in nulls.items()},
        }
    )
    return table[COMMONNESS_INTERVAL_COLUMNS]


def gap_interval_table(kinds: StabilityReplicates, promptset: str, confidence: float) -> pd.DataFrame:
    """GAP_INTERVAL_COLUMNS: the stability gap of §4.6 (delta_s, s_max, s_min, r_max, r_min) of the pooled
    same-layer stability, with its interval (each replicate's own extreme layers); p_value NaN."""
    same = kinds["same_layer"]
    replicates = gap_replicates(same["layer"])
    estimate = gap_replicates(same["layer_estimate"])
    rows = []
    for statistic, values in replicates.items():
        low, high = percentile_interval(values, confidence)
        rows.append((promptset, statistic, float(estimate[statistic]), float(low), float(high), len(values), np.nan))
    return pd.DataFrame(rows, columns=GAP_INTERVAL_COLUMNS)
