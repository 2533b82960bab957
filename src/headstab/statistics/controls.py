"""Controls for sharpness and for chance, beside every stability number (docs/statistics.md).

- head entropy (`headstab.sharpness`) next to head, layer and pooled stability;
- the content variant: stability of the patterns less each head's position-only template, with its
  interval, its own prompt-permutation null and the difference from it, and the heads' content share
  (how much of a pattern the variant compares);
- commonness (Eq. 10) and commonness without the head itself under the prompt-permutation null: each
  head against its peers of the same refit on the partner prompts, the partner construction of the
  stability null within one refit;
- the stability gap of §4.6 from the null, from stability above the null and from the content variant.
"""

from __future__ import annotations

import numpy as np

from headstab.statistics.bootstrap import percentile_interval, prompt_weights
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import gap_replicates
from headstab.statistics.resampling import commonness_replicates

__all__ = [
    "CONTENT_COLUMNS",
    "COMMONNESS_NULL_COLUMNS",
    "attach_content_share",
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
CONTENT_COLUMNS.insert(1, "content_share")  # beside stability_content: how much of the pattern it compares
SHARE_AXES = {3: (), 2: (2,), 1: (0, 2)}  # head_share [anchor, layer, head] -> a head, layer or pooled statistic
COMMONNESS_METHOD = "commonness_prompt_groups"  # its intervals' entry in headstab.statistics.calibration
# Eq. 10's commonness (the head itself included) and commonness without the head's match with itself: the
# self term adds (1 - self_null) / H above the null, most for a head whose pattern moves with the prompt.
COMMONNESS_NULL_COLUMNS = [
    *(f"commonness{part}{suffix}" for part in ("_null", "_above_null") for suffix in ("", "_ci_low", "_ci_high")),
    "commonness_excl_self_ci_low",
    "commonness_excl_self_ci_high",
    *(
        f"commonness_excl_self{part}{suffix}"
        for part in ("_null", "_above_null")
        for suffix in ("", "_ci_low", "_ci_high")
    ),
    "calibration",
]


def attach_content_share(kinds: dict, share: np.ndarray | None) -> None:
    """Put the heads' content share [seed, layer, head] (`headstab.sharpness.content_share`, mean over prompts)
    beside the replicates of kind "content", as "head_share", where both are present."""
    if share is not None and "content" in kinds:
        kinds["content"]["head_share"] = np.asarray(share, dtype=np.float64)


def content_columns(kinds: dict, scope: str, key: str, confidence: float) -> dict[str, np.ndarray]:
    """CONTENT_COLUMNS of statistic `key` ("head" or "layer") from the replicates of kinds "content" and
    "content_null"; NaN for the cross-layer scope and where the prompt set has no content variant.
    content_share: the content kind's head_share [seed, layer, head] averaged down to the statistic's shape
    ([anchor, layer, head], [anchor, layer] or [layer]); NaN without it."""
    shape = kinds[scope][f"{key}_estimate"].shape
    if scope != "same_layer" or "content" not in kinds:
        return {column: np.full(shape, np.nan) for column in CONTENT_COLUMNS}
    content, null = kinds["content"], kinds["content_null"]
    share = content.get("head_share")
    columns = {"content_share": np.full(shape, np.nan) if share is None else share.mean(axis=SHARE_AXES[len(shape)])}
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
    return np.asarray(entropy, dtype=np.float64).mean(axis=reduce_axes)  # axis () keeps every value


def _within_refit(
    grouped: np.ndarray, group_sizes: np.ndarray, prompt_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Commonness with and without the head itself, float64 [boot, seed, layer, head] each, of the prompt
    groups weighted by `prompt_counts` [boot, group]; grouped: [group, seed_a, seed_b, layer, head_a, head_b].
    Without self: (H x with - self) / (H - 1), NaN for a layer of one head."""
    with_self = commonness_replicates(grouped, group_sizes, prompt_counts)
    n_heads = grouped.shape[-1]
    if n_heads < 2:
        return with_self, np.full(with_self.shape, np.nan)
    within = np.diagonal(grouped, axis1=1, axis2=2)  # [group, layer, head_a, head_b, seed]
    self_match = np.diagonal(within, axis1=2, axis2=3)  # [group, layer, seed, head]
    per_group = np.swapaxes(self_match, 1, 2)  # [group, seed, layer, head]; float64 in the weighted sum
    self_term = np.tensordot(prompt_weights(prompt_counts, group_sizes), per_group, axes=1)
    return with_self, (n_heads * with_self - self_term) / (n_heads - 1)


def commonness_null_columns(grouped, prompt_counts: np.ndarray, confidence: float) -> dict[str, np.ndarray]:
    """COMMONNESS_NULL_COLUMNS, each [seed, layer, head]: commonness (Eq. 10, the head itself included) and
    commonness without the head itself, each on the null's partner prompts with its interval over the same
    prompt-group resamples as the observed commonness, and the paired difference observed - null with its
    interval; the interval of observed commonness without self (its estimate is `commonness_table`'s); and
    calibration, the label of these prompt-group intervals at the set's number of groups."""
    sizes = grouped.group_sizes
    full = np.ones_like(sizes)[None]  # [1, group]: every group once, the estimate on all prompts
    replicates = {kind: _within_refit(getattr(grouped, kind), sizes, prompt_counts) for kind in ("observed", "null")}
    estimates = {kind: _within_refit(getattr(grouped, kind), sizes, full) for kind in ("observed", "null")}
    values = {}
    for part, index in (("commonness", 0), ("commonness_excl_self", 1)):
        observed, null = replicates["observed"][index], replicates["null"][index]
        observed_estimate, null_estimate = estimates["observed"][index][0], estimates["null"][index][0]
        values[part] = (observed_estimate, observed)
        values[f"{part}_null"] = (null_estimate, null)
        values[f"{part}_above_null"] = (observed_estimate - null_estimate, observed - null)
    del values["commonness"]  # Eq. 10's own interval is the commonness table's ci_low, ci_high
    columns = {}
    for name, (estimate, draws) in values.items():
        low, high = _nan_interval(draws, confidence)
        columns.update({name: estimate, f"{name}_ci_low": low, f"{name}_ci_high": high})
    columns["calibration"] = np.full(columns["commonness_null"].shape, calibration_label(COMMONNESS_METHOD, len(sizes)))
    return {column: columns[column] for column in COMMONNESS_NULL_COLUMNS}


def _nan_interval(replicates: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """percentile_interval, NaN without a warning where every replicate is NaN (a layer of one head)."""
    if np.isnan(replicates).all():
        return np.full(replicates.shape[1:], np.nan), np.full(replicates.shape[1:], np.nan)
    return percentile_interval(replicates, confidence)


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
