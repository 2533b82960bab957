"""Per-head effective rank across refits, and against head stability (docs/beyond_the_paper.md).

A head's outputs over many inputs, `attn.hook_z` [n_tokens, d_head]; its singular values σ_k;
p_k = σ_k² / Σ σ²; PR = exp(H(p)) = exp(-Σ p_k log p_k), between 1 (every output on one line) and d_head
(isotropic outputs). exp of the spectral entropy is the entropy effective rank (Roy & Vetterli 2007, "The
effective rank: a measure of effective dimensionality", EUSIPCO); the per-head spectral signal this builds on
calls it the participation ratio (the classical participation ratio, (Σσ²)² / Σσ⁴, is another number).

Its reading there, "PR ≈ 1 for a content-independent head" (one default output whatever the input), holds
for the uncentred spectrum, `pr_uncentred`: centring removes what every token shares, so the same head's
centred `pr` is its noise's, near d_head. Wherever that reading is invoked (the PR-vs-stability figure,
`pr_uncentred_*` statistics), the uncentred value is used; `pr` (centred) measures how many directions the
variation across tokens spans.

Positions pooled (docs/beyond_the_paper.md):
- "all": every real token position of every prompt of the set, stacked into one matrix. BOS (position 0
  when the cache prepended one) is left out by default: its output is the same for every prompt (it attends
  to itself alone), so it adds one point repeated n_prompts times; `include_bos` keeps it.
- "last": the last real position of each prompt only ([n_prompts, d_head]); BOS never is one.

Across refits: the anchor head's PR beside its best match's PR in each pair refit (same-layer match,
`pair_stability.csv`). Against stability: per layer, Pearson's r of a head's PR in a refit with its
stability as anchor of that refit. Intervals resample refits (`headstab.statistics.refit_weights`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.statistics.calibration import calibration_label
from headstab.statistics.refit_weights import refit_interval

__all__ = [
    "POSITIONS",
    "PR_COLUMNS",
    "participation_ratio",
    "head_outputs",
    "effective_rank_table",
    "matched_rank_table",
    "rank_correlation_table",
]

POSITIONS = ("all", "last")
PR_COLUMNS = ["seed", "positions", "layer", "head", "pr", "pr_uncentred", "n_tokens"]
CORRELATION_COLUMNS = ["positions", "layer", "statistic", "estimate", "ci_low", "ci_high", "n_rows", "n_boot"]
CORRELATION_COLUMNS += ["calibration"]
# How each kind of interval is calibrated (headstab.statistics.calibration), by refit_interval's statistic.
INTERVAL_METHODS = {"mean": "refit_bootstrap_mean_effective_rank", "pearson": "refit_bootstrap_pearson_effective_rank"}


def participation_ratio(outputs: np.ndarray, centre: bool = True) -> np.ndarray:
    """PR = exp(H(σ²/Σσ²)) of each [n_tokens, d_head] matrix, centred over tokens unless `centre` is False.

    outputs: [..., n_tokens, d_head]. Returns float64 [...]; NaN for a matrix with no variance (PR undefined).
    σ² are the eigenvalues of the matrix's Gram matrix XᵀX [d_head, d_head] (cheaper than an SVD of X for
    n_tokens >> d_head, same values). Centring removes a fixed vector shared by every token: a fixed vector
    plus isotropic noise has PR ≈ 1 uncentred but ≈ d_head centred (the noise is all that is left).
    """
    x = np.asarray(outputs, dtype=np.float64)
    if x.ndim < 2 or x.shape[-2] < 2:
        raise ValueError(f"outputs must be [..., n_tokens >= 2, d_head]; got shape {x.shape}")
    if centre:
        x = x - x.mean(axis=-2, keepdims=True)
    gram = np.swapaxes(x, -1, -2) @ x
    eigenvalues = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    total = eigenvalues.sum(axis=-1, keepdims=True)
    # Eigenvalues at rounding level of the largest are zero singular values, not a direction.
    tiny = eigenvalues <= total * x.shape[-1] * np.finfo(np.float64).eps
    p = np.divide(eigenvalues, total, out=np.zeros_like(eigenvalues), where=(total > 0) & ~tiny)
    entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return np.where(total[..., 0] > 0, np.exp(entropy), np.nan)


def head_outputs(
    hook_z: np.ndarray, lengths: np.ndarray, positions: str, prepend_bos: bool, include_bos: bool = False
) -> np.ndarray:
    """The rows of every head's output matrix: [head, n_tokens, d_head].

    hook_z: [prompt, pos, head, d_head] of one layer, zero-padded; lengths: [prompt] real tokens (BOS
    included when prepended). positions: "all" or "last" (module docstring).
    """
    hook_z = np.asarray(hook_z)
    lengths = np.asarray(lengths)
    if hook_z.ndim != 4 or lengths.shape != (hook_z.shape[0],):
        raise ValueError(
            f"hook_z must be [prompt, pos, head, d_head] with lengths [prompt]; got {hook_z.shape}, {lengths.shape}"
        )
    if positions == "last":
        rows = hook_z[np.arange(lengths.size), lengths - 1]  # [prompt, head, d_head]
    elif positions == "all":
        pos = np.arange(hook_z.shape[1])[None, :]
        first = 1 if prepend_bos and not include_bos else 0
        rows = hook_z[(pos < lengths[:, None]) & (pos >= first)]  # [token, head, d_head]
    else:
        raise ValueError(f"positions must be one of {POSITIONS}; got {positions!r}")
    return np.ascontiguousarray(np.swapaxes(rows, 0, 1))


def effective_rank_table(
    hook_z: np.ndarray, lengths: np.ndarray, seed: int | str, prepend_bos: bool, include_bos: bool = False
) -> pd.DataFrame:
    """PR_COLUMNS for every layer and head of one refit, both position poolings.

    hook_z: [layer, prompt, pos, head, d_head] (`CacheReader.hook_z`); lengths: [prompt].
    """
    frames = []
    for positions in POSITIONS:
        for layer in range(hook_z.shape[0]):
            rows = head_outputs(hook_z[layer], lengths, positions, prepend_bos, include_bos)
            pr = participation_ratio(rows)
            frames.append(
                pd.DataFrame(
                    {
                        "seed": seed,
                        "positions": positions,
                        "layer": layer,
                        "head": np.arange(pr.size),
                        "pr": pr,
                        "pr_uncentred": participation_ratio(rows, centre=False),
                        "n_tokens": rows.shape[1],
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)[PR_COLUMNS]


def matched_rank_table(pr: pd.DataFrame, pair_stability: pd.DataFrame) -> pd.DataFrame:
    """The anchor head's PR beside its best match's PR in every pair refit (same-layer scope).

    pr: PR_COLUMNS; pair_stability: rows of one prompt set and scope same_layer (anchor_seed, pair_seed,
    layer, head, best_layer, best_head, similarity). Returns positions, anchor_seed, pair_seed, layer, head,
    pr_anchor, pr_match, similarity.
    """
    if set(pair_stability["scope"]) != {"same_layer"} or pair_stability["promptset"].nunique() != 1:
        raise ValueError("pair_stability must hold the rows of one prompt set and scope same_layer")
    keys = pr.rename(columns={"seed": "anchor_seed", "pr": "pr_anchor"})[
        ["positions", "anchor_seed", "layer", "head", "pr_anchor"]
    ]
    matches = pr.rename(columns={"seed": "pair_seed", "layer": "best_layer", "head": "best_head", "pr": "pr_match"})[
        ["positions", "pair_seed", "best_layer", "best_head", "pr_match"]
    ]
    pairs = pair_stability[["anchor_seed", "pair_seed", "layer", "head", "best_layer", "best_head", "similarity"]]
    table = pairs.merge(keys, on=["anchor_seed", "layer", "head"], how="left", indicator="anchor_found")
    table = table.merge(
        matches, on=["positions", "pair_seed", "best_layer", "best_head"], how="left", indicator="match_found"
    )
    lacking = (table["anchor_found"] != "both") | (table["match_found"] != "both")
    if lacking.any() or len(table) != len(pairs) * len(POSITIONS):
        missing = table.loc[lacking, ["anchor_seed", "pair_seed", "layer", "head"]].head(3).values.tolist()
        raise ValueError(f"effective rank lacks the refits or heads of pair rows (anchor, pair, layer, head) {missing}")
    return table[["positions", "anchor_seed", "pair_seed", "layer", "head", "pr_anchor", "pr_match", "similarity"]]


def rank_correlation_table(
    pr: pd.DataFrame,
    head_stability: pd.DataFrame,
    matched: pd.DataFrame,
    n_boot: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """Per positions and layer: CORRELATION_COLUMNS for five statistics, intervals over refits.

    - pr_mean: mean PR over heads and refits;
    - pr_vs_stability: Pearson r of PR (head h of refit s) with head stability (anchor s, head h);
    - pr_anchor_vs_match: Pearson r of the anchor head's PR with its best match's PR (is PR stable?);
    - pr_uncentred_mean, pr_uncentred_vs_stability: the first two for the uncentred PR, the one that is ≈ 1 for
      a content-independent head.
    head_stability: one prompt set, scope same_layer (anchor_seed, layer, head, stability).
    `calibration`: whether the interval is calibrated at the number of refits (`headstab.statistics.calibration`).
    """
    seeds = sorted(set(pr["seed"]))
    index = {value: i for i, value in enumerate(seeds)}
    labels = {statistic: calibration_label(method, len(seeds)) for statistic, method in INTERVAL_METHODS.items()}
    stability = head_stability[["anchor_seed", "layer", "head", "stability"]].rename(columns={"anchor_seed": "seed"})
    joined = pr.merge(stability, on=["seed", "layer", "head"], how="left")
    if joined["stability"].isna().any():
        missing = joined.loc[joined["stability"].isna(), ["seed", "layer", "head"]].head(3).values.tolist()
        raise ValueError(f"head stability lacks (seed, layer, head) {missing}")
    rows = []
    for (positions, layer), group in joined.groupby(["positions", "layer"], sort=True):
        refits = group["seed"].map(index).to_numpy()
        pairs = matched[(matched["positions"] == positions) & (matched["layer"] == layer)]
        pair_refits = np.stack([pairs["anchor_seed"].map(index), pairs["pair_seed"].map(index)], axis=1)
        draws = {
            "pr_mean": ("mean", group["pr"], None, refits),
            "pr_vs_stability": ("pearson", group["pr"], group["stability"], refits),
            "pr_anchor_vs_match": ("pearson", pairs["pr_anchor"], pairs["pr_match"], pair_refits),
            "pr_uncentred_mean": ("mean", group["pr_uncentred"], None, refits),
            "pr_uncentred_vs_stability": ("pearson", group["pr_uncentred"], group["stability"], refits),
        }
        for name, (statistic, x, y, units) in draws.items():
            estimate, low, high = refit_interval(
                statistic, x, y, units, len(seeds), n_boot, seed + int(layer), confidence
            )
            rows.append((positions, int(layer), name, estimate, low, high, len(x), n_boot, labels[statistic]))
    return pd.DataFrame(rows, columns=CORRELATION_COLUMNS)
