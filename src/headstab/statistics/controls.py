"""Controls for sharpness and for chance, beside every stability number (docs/statistics.md).

- head entropy (`headstab.sharpness`) next to head, layer and pooled stability;
- the content variant: stability of the patterns less each head's position-only template, with its
  interval, its own prompt-permutation null and the difference from it;
- commonness (Eq. 10) under the prompt-permutation null: each head against its peers of the same refit
  on the partner prompts, the partner construction of the stability null within one refit;
- the stability gap of §4.6 from the null, from stability above the null and from the content variant.
"""

from __future__ import annotations

import numpy as np

from headstab.statistics.bootstrap import percentile_interval
from headstab.statistics.hypothesis import gap_replicates
from headstab.statistics.resampling import commonness_replicates

__all__ = [
    "CONTENT_COLUMNS",
    "COMMONNESS_NULL_COLUMNS",
    "commonness_null_columns",
    "content_columns",
    "entropy_column",
    "gap_control_rows",
]

CONTENT = "stability_content"
CONTENT_COLUMNS = [
    f"{CONTENT}{suffix}"
    for part in ("", "_null", "_above_null")
    for suffix in (part, f"{part}_ci_low", f"{part}_ci_high")
]
COMMONNESS_NULL_COLUMNS = [
    "commonness_null",
    "commonness_null_ci_low",
    "commonness_null_ci_high",
    "commonness_above_null",
    "commonness_above_null_ci_low",
    "commonness_above_null_ci_high",
    "commonness_excl_self_null",
]


def content_columns(kinds: dict, scope: str, key: str, confidence: float) -> dict[str, np.ndarray]:
    """CONTENT_COLUMNS of statistic `key` ("head" or "layer") from the replicates of kinds "content" and
    "content_null"; NaN for the cross-layer scope and where the prompt set has no content variant."""
    shape = kinds[scope][f"{key}_estimate"].shape
    if scope != "same_layer" or "content" not in kinds:
        return {column: np.full(shape, np.nan) for column in CONTENT_COLUMNS}
    content, null = kinds["content"], kinds["content_null"]
    columns = {}
    for part, estimate, replicates in (
        ("", content[f"{key}_estimate"], content[key]),
        ("_null", null[f"{key}_estimate"], null[key]),
        ("_above_null", content[f"{key}_estimate"] - null[f"{key}_estimate"], content[key] - null[key]),
    ):
        low, high = percentile_interval(replicates, confidence)
        columns.update({f"{CONTENT}{part}": estimate, f"{CONTENT}{part}_ci_low": low, f"{CONTENT}{part}_ci_high": high})
    return columns


def entropy_column(entropy: np.ndarray | None, shape: tuple[int, ...], reduce_axes: tuple[int, ...] = ()) -> np.ndarray:
    """The heads' entropy [seed, layer, head] averaged over `reduce_axes`, or NaN of `shape` when the prompt
    groups carry none."""
    if entropy is None:
        return np.full(shape, np.nan)
    values = np.asarray(entropy, dtype=np.float64)
    return values.mean(axis=reduce_axes) if reduce_axes else values


def commonness_null_columns(grouped, prompt_counts: np.ndarray, confidence: float) -> dict[str, np.ndarray]:
    """COMMONNESS_NULL_COLUMNS, each [seed, layer, head]: commonness on the null's partner prompts (the
    head itself included, as Eq. 10), its interval over the same prompt-group resamples as the observed
    commonness, the paired difference from it, and the null of commonness without the head itself."""
    observed = commonness_replicates(grouped.observed, grouped.group_sizes, prompt_counts)
    null = commonness_replicates(grouped.null, grouped.group_sizes, prompt_counts)
    within = np.moveaxis(np.diagonal(grouped.mean("null"), axis1=0, axis2=1), -1, 0)  # [seed, layer, head, head]
    estimate = within.mean(axis=-1)
    n_heads = within.shape[-1]
    self_null = np.diagonal(within, axis1=-2, axis2=-1)
    excl = (within.sum(axis=-1) - self_null) / (n_heads - 1) if n_heads > 1 else np.full(estimate.shape, np.nan)
    observed_estimate = np.moveaxis(np.diagonal(grouped.mean("observed"), axis1=0, axis2=1), -1, 0).mean(axis=-1)
    null_low, null_high = percentile_interval(null, confidence)
    above_low, above_high = percentile_interval(observed - null, confidence)
    return dict(
        zip(
            COMMONNESS_NULL_COLUMNS,
            (estimate, null_low, null_high, observed_estimate - estimate, above_low, above_high, excl),
        )
    )


def gap_control_rows(
    kinds: dict, promptset: str, confidence: float
) -> list[tuple[str, str, float, float, float, int, float]]:
    """Rows of the gap interval table (GAP_INTERVAL_COLUMNS) for ΔS of pooled same-layer stability under
    the controls: of the null (delta_s_prompt_null), of stability above it (delta_s_above_null), of the
    content variant and its excess over its null (delta_s_content, delta_s_content_above_null), each with its
    bootstrap interval and no p-value (the layer tests, with refits as units, are rule stability_gap's)."""
    same, null = kinds["same_layer"], kinds["null"]
    sources = [("prompt_null", null["layer_estimate"], null["layer"])]
    sources.append(("above_null", same["layer_estimate"] - null["layer_estimate"], same["layer"] - null["layer"]))
    if "content" in kinds:
        content, content_null = kinds["content"], kinds["content_null"]
        sources.append(("content", content["layer_estimate"], content["layer"]))
        sources.append(
            (
                "content_above_null",
                content["layer_estimate"] - content_null["layer_estimate"],
                content["layer"] - content_null["layer"],
            )
        )
    rows = []
    for name, estimate, replicates in sources:
        low, high = percentile_interval(gap_replicates(replicates)["delta_s"], confidence)
        estimate_gap = float(gap_replicates(estimate)["delta_s"])
        rows.append((promptset, f"delta_s_{name}", estimate_gap, float(low), float(high), len(replicates), np.nan))
    return rows
