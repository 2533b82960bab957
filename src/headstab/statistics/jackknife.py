"""Jackknife-t intervals of stability, with refits and prompt groups as its two samples (docs/statistics.md,
"Jackknife-t intervals").

Stability is a mean over pairs of refits of the best match (a max over candidate heads) of prompt-mean
similarities, so its sampling variance has a refit part and a prompt part, each with its own jackknife:

- refits. A pooled statistic is a mean over ordered pairs of distinct refits: each refit's pseudo-value
  psi_s = N U - (N - 1) U_(-s) (`headstab.statistics.hypothesis.pair_pseudo_values`) carries the variance of
  such a mean, v_refits = var(psi) / N with N - 1 degrees of freedom. A per-anchor statistic keeps its anchor,
  and its N - 1 pair refits are i.i.d. given it: v_refits = var over pair refits / (N - 1), N - 2 degrees.
- prompt groups: the statistic recomputed without each group g (the max over candidates taken again),
  v_prompts = (G - 1) / G sum_g (U_(-g) - mean_g U_(-g))^2, G - 1 degrees.

The interval is U_bc +- t_nu sqrt(v_refits + v_prompts), nu the Welch-Satterthwaite degrees of freedom, centred
on U_bc = U - (G - 1) (mean_g U_(-g) - U): the estimate less the groups' jackknife estimate of its bias. Where
candidate heads tie, the max of prompt means lies above the max of the true means, and the bias does not
shrink with refits, so an interval centred on U misses the true value once the refits' part is small.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from headstab.statistics.bootstrap import best_match
from headstab.statistics.hypothesis import pair_pseudo_values

__all__ = [
    "JACKKNIFE_COLUMNS",
    "JACKKNIFE_LEVELS",
    "jackknife_columns",
    "jackknife_parts",
    "jackknife_scope",
    "jackknife_t_interval",
    "leave_one_group_out",
]

JACKKNIFE_LEVELS = ("head", "layer", "pooled")
# Per row: the stability, its prompt-permutation null and the paired difference, each bias-corrected with its interval.
JACKKNIFE_COLUMNS = [
    f"{prefix}jackknife{suffix}" for prefix in ("", "null_", "above_null_") for suffix in ("", "_ci_low", "_ci_high")
]


def leave_one_group_out(grouped: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """Best matches without each prompt group: grouped [group, seed_a, seed_b, layer, head_a, head_b] ->
    float64 [group, seed_a, seed_b, layer, head_a], row g the best match of the other groups' size-weighted mean."""
    sizes = np.asarray(group_sizes, dtype=np.float64)
    if len(sizes) < 2:
        raise ValueError(f"a jackknife over prompt groups needs at least 2 groups; got {len(sizes)}")
    total = np.zeros(grouped.shape[1:], dtype=np.float64)
    for size, group in zip(sizes, grouped, strict=True):  # group by group: no float64 copy of the whole tensor
        total += size * group
    return np.stack([best_match((total - size * group) / (sizes.sum() - size)) for size, group in zip(sizes, grouped)])


def _off_diagonal(values: np.ndarray) -> np.ndarray:
    """[..., a, b, layer, head] -> [..., a, b - 1, layer, head]: each anchor's values against the other refits."""
    n = values.shape[-4]
    keep = ~np.eye(n, dtype=bool)
    return values[..., keep, :, :].reshape(*values.shape[:-4], n, n - 1, *values.shape[-2:])


def jackknife_parts(pair_best: np.ndarray, loo: np.ndarray, level: str) -> dict[str, np.ndarray]:
    """The inputs of `jackknife_t_interval` for one statistic of stability's tables.

    pair_best: [seed_a, seed_b, layer, head] full-data best matches; loo: [group, seed_a, seed_b, layer, head]
    (`leave_one_group_out`); level: "head" (per anchor head, [anchor, layer, head]), "layer" (per anchor, its
    mean over heads, [anchor, layer]) or "pooled" ([layer]: mean over ordered pairs of distinct refits and heads).
    Returns "estimate", "refit_var", "refit_df" and "groups" ([group, ...]: the statistic without each group).
    A difference of two kinds (stability - null) is the difference of their pair_best and loo.
    """
    n = pair_best.shape[0]
    if level not in JACKKNIFE_LEVELS:
        raise ValueError(f"level must be one of {JACKKNIFE_LEVELS}; got {level!r}")
    if n < 3:
        raise ValueError(f"a jackknife over refits needs at least 3 refits; got {n}")
    if level == "pooled":
        pseudo = pair_pseudo_values(pair_best.mean(axis=-1))  # [refit, layer]
        groups = _off_diagonal(loo).mean(axis=(1, 2, 4))
        return {
            "estimate": pseudo.mean(axis=0),
            "refit_var": pseudo.var(axis=0, ddof=1) / n,
            "refit_df": n - 1.0,
            "groups": groups,
        }
    partners, groups = _off_diagonal(pair_best), _off_diagonal(loo)  # [a, partner, layer, head]
    if level == "layer":
        partners, groups = partners.mean(axis=-1), groups.mean(axis=-1)
    return {
        "estimate": partners.mean(axis=1),
        "refit_var": partners.var(axis=1, ddof=1) / (n - 1),
        "refit_df": n - 2.0,
        "groups": groups.mean(axis=2),
    }


def jackknife_t_interval(
    estimate: np.ndarray, refit_var: np.ndarray, refit_df: float | np.ndarray, groups: np.ndarray, confidence: float
) -> dict[str, np.ndarray]:
    """The two-sample jackknife-t interval of the module docstring.

    estimate [...]: the statistic on all data; refit_var [...] and refit_df: its refit part; groups [group, ...]:
    the statistic without each group. Returns "estimate" (bias-corrected over groups), "ci_low", "ci_high", "se",
    "df" and "p_value", the two-sided t test of a true value of 0 (the interval at level 1 - p just reaches 0); an
    interval of zero width where neither part varies, and there p is 1 for an estimate of 0, else 0; NaN interval
    and p where an input is NaN.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"config key 'statistics.confidence' must be in (0, 1); got {confidence}")
    groups = np.asarray(groups, dtype=np.float64)
    estimate, refit_var = np.asarray(estimate, dtype=np.float64), np.asarray(refit_var, dtype=np.float64)
    n_groups = groups.shape[0]
    mean_groups = groups.mean(axis=0)
    group_var = (n_groups - 1) / n_groups * ((groups - mean_groups) ** 2).sum(axis=0)
    corrected = estimate - (n_groups - 1) * (mean_groups - estimate)
    total = refit_var + group_var
    undefined = np.isnan(total) | np.isnan(corrected)  # a NaN input: no interval and no p, not a zero-width one
    with np.errstate(divide="ignore", invalid="ignore"):
        df = total**2 / (refit_var**2 / refit_df + group_var**2 / (n_groups - 1))
        half = np.where(total > 0, stats.t.ppf((1.0 + confidence) / 2.0, df) * np.sqrt(total), 0.0)
        p_value = np.where(total > 0, 2.0 * stats.t.sf(np.abs(corrected) / np.sqrt(total), df), 1.0 * (corrected == 0))
    half, p_value = np.where(undefined, np.nan, half), np.where(undefined, np.nan, p_value)
    return {
        "estimate": corrected,
        "ci_low": corrected - half,
        "ci_high": corrected + half,
        "se": np.sqrt(total),
        "df": df,
        "p_value": p_value,
    }


def jackknife_columns(grouped, pair_best: dict[str, np.ndarray], confidence: float) -> dict[str, dict[str, np.ndarray]]:
    """JACKKNIFE_COLUMNS of the same-layer rows of each table level: {"head": {column: [anchor, layer, head]},
    "layer": {column: [anchor, layer]}, "pooled": {column: [layer]}} (levels as `jackknife_parts`).

    grouped: a `GroupedSimilarity` (observed and null [group, seed_a, seed_b, layer, head_a, head_b]);
    pair_best {"observed", "null"}: their full-data best matches [seed_a, seed_b, layer, head]. NaN with fewer
    than 3 refits or 2 prompt groups (a jackknife there has no spread to measure).
    """
    n_seeds, _, n_layers, n_heads = pair_best["observed"].shape
    shapes = {"head": (n_seeds, n_layers, n_heads), "layer": (n_seeds, n_layers), "pooled": (n_layers,)}
    if n_seeds < 3 or len(grouped.group_sizes) < 2:
        return {
            level: {column: np.full(shape, np.nan) for column in JACKKNIFE_COLUMNS} for level, shape in shapes.items()
        }
    loo = {kind: leave_one_group_out(getattr(grouped, kind), grouped.group_sizes) for kind in ("observed", "null")}
    sources = {
        "": (pair_best["observed"], loo["observed"]),
        "null_": (pair_best["null"], loo["null"]),
        "above_null_": (pair_best["observed"] - pair_best["null"], loo["observed"] - loo["null"]),
    }
    columns: dict[str, dict[str, np.ndarray]] = {level: {} for level in JACKKNIFE_LEVELS}
    for level in JACKKNIFE_LEVELS:
        for prefix, (values, groups) in sources.items():
            parts = jackknife_parts(values, groups, level)
            interval = jackknife_t_interval(
                parts["estimate"], parts["refit_var"], parts["refit_df"], parts["groups"], confidence
            )
            for suffix, key in (("", "estimate"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high")):
                columns[level][f"{prefix}jackknife{suffix}"] = interval[key]
    return columns


def jackknife_scope(columns: dict[str, np.ndarray] | None, scope: str, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """`columns` (one level of `jackknife_columns`) for the same-layer rows; NaN for the cross-layer rows (no
    prompt groups of every layer pair to leave out) and without columns."""
    if scope == "same_layer" and columns is not None:
        return columns
    return {column: np.full(shape, np.nan) for column in JACKKNIFE_COLUMNS}
