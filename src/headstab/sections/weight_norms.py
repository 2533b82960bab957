"""Weight norms vs layer stability (paper §4.4.1, Table B.5).

Each refit's per-layer weight norms (W_Q, W_K, W_V, W_O, MLP W_in/W_out, LayerNorm gains) from its
`final.pt`, processed as the caches were (config key analysis.weight_processing); their Pearson and
Spearman correlations over layers with that refit's layer stability as anchor; and Table B.5 across
architectures. Layers are 0-based.

A correlation over 2, 4, 8 or 12 layers has few points: with 2 layers every r is +-1 by construction
(`by_construction` in the summary). The summary therefore also pools over anchors: the repeated-measures
correlation (Bakdash & Marusich 2017), Pearson's r of the layer values centred within each anchor, from the
per-anchor sums of squares (`norm_ss`, `stability_ss`). Table B.5 used the whole layer's W_Q norm;
`whole_layer_norm` (and the correlations `whole_layer_*`) give it beside the configured norm.

Sharper heads have lower cosine whatever they compute (docs/statistics.md), so each correlation comes
with its partial correlation given entropy: over layers given the layer's mean head entropy, and per
layer over heads (every anchor's, each with its own W_Q norm) given each head's entropy.

`load_trained_model` (torch) is imported inside `trained_state`: the correlation and summary jobs import
this module without loading a model, and importing torch is seconds of a job's start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from headstab.plan.spec import ArchitectureSpec
from headstab.statistics.bootstrap import percentile_interval
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import benjamini_hochberg
from headstab.statistics.resampling import mean_interval, partial_correlation
from headstab.table_rows import pearson_or_nan, select_rows

ATTENTION_MATRICES = ("W_Q", "W_K", "W_V", "W_O")
MATRIX_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")
ATTENTION_NORMS = ("per_head_mean", "layer")
NORM_COLUMNS = ["seed", "layer", "matrix", "frobenius_norm", "whole_layer_norm"]
CORRELATION_COLUMNS = [
    "anchor_seed",
    "matrix",
    "pearson_r",
    "p_value",
    "spearman_r",
    "whole_layer_pearson_r",
    "n_layers",
    "norm_ss",
    "stability_ss",
    "partial_r_entropy",
    "q_value",
    "calibration",
]
HEAD_NORM_COLUMNS = ["seed", "layer", "head", "matrix", "frobenius_norm"]
PARTIAL_COLUMNS = ["layer", "matrix", "n_heads", "n_anchors", "pearson_r", "partial_r", "partial_r_ci_low"]
PARTIAL_COLUMNS += ["partial_r_ci_high", "entropy_r", "n_boot", "calibration"]

# Bridge state-dict names (`blocks.{l}.attn.q.weight`, nn.Linear layout [out_features, in_features]).
_STATE_KEYS = {
    "W_Q": "attn.q.weight",
    "W_K": "attn.k.weight",
    "W_V": "attn.v.weight",
    "W_O": "attn.o.weight",
    "W_in": "mlp.in.weight",
    "W_out": "mlp.out.weight",
    "ln1_w": "ln1.weight",
    "ln2_w": "ln2.weight",
}


def _normalise_key(key: str) -> str:
    """Map NativeModel / bridge state-dict names onto `blocks.{l}.attn.q.weight` form."""
    key = key.replace("._original_component", "").replace("_original_component.", "")
    key = re.sub(r"^layers\.", "blocks.", key)
    key = key.replace("mlp.fc_in.", "mlp.in.").replace("mlp.fc_out.", "mlp.out.")
    return key


def bridge_state(weights: Mapping[str, Any] | Any) -> dict[str, Any]:
    """A state dict (or an object with `.state_dict()`) with keys in `blocks.{l}.attn.q.weight` form."""
    if hasattr(weights, "state_dict") and not isinstance(weights, Mapping):
        weights = weights.state_dict()
    return {_normalise_key(k): v for k, v in weights.items()}


def to_numpy(value: Any) -> np.ndarray:
    """A tensor or array as float64 numpy (tensors through float32 on the CPU)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().float().numpy()
    return np.asarray(value, dtype=np.float64)


def trained_state(spec: ArchitectureSpec, weights_path: str | Path, weight_processing: Sequence[str]) -> dict[str, Any]:
    """A refit's weights as every analysis sees them: `final.pt` checked and processed as the caches
    were (`headstab.refits.models.load_trained_model`), as CPU tensors."""
    # torch loads here, not at import: the summary jobs that import this module load no model
    from headstab.refits.models import load_trained_model

    model = load_trained_model(spec, weights_path, "cpu", weight_processing=weight_processing)
    return {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}


def _attention_norm(
    w: np.ndarray, key: str, matrix: str, n_heads: int, d_head: int, attention_norm: str
) -> tuple[float, float]:
    """Norm of one attention matrix as `attention_norm` asks (per head, then averaged or combined over heads),
    and the whole layer's Frobenius norm."""
    per_head = _head_norms(w, key, matrix, n_heads, d_head)
    whole = float(np.sqrt((per_head**2).sum()))
    return (float(per_head.mean()) if attention_norm == "per_head_mean" else whole), whole


def _head_norms(w: np.ndarray, key: str, matrix: str, n_heads: int, d_head: int) -> np.ndarray:
    """[head] Frobenius norms of one attention matrix's heads (W_O: columns, the others: rows)."""
    per_head_axis = 1 if matrix == "W_O" else 0
    if w.ndim != 2 or w.shape[per_head_axis] != n_heads * d_head:
        raise ValueError(
            f"{key} has shape {w.shape}; expected n_heads*d_head = {n_heads * d_head} "
            f"along axis {per_head_axis} (n_heads={n_heads}, d_head={d_head})"
        )
    if per_head_axis == 1:
        w = w.T
    heads = w.reshape(n_heads, d_head, -1)
    return np.sqrt((heads**2).sum(axis=(1, 2)))


def layer_weight_norms(
    weights: Mapping[str, Any] | Any, n_layers: int, n_heads: int, d_head: int, attention_norm: str = "per_head_mean"
) -> pd.DataFrame:
    """Per-layer weight norms for §4.4.1 (Table B.5).

    weights: a state dict (bridge names `blocks.{l}.attn.q.weight` ..., or NativeModel names
    `layers.{l}...`; tensors or arrays) or any object with `.state_dict()` (e.g. a TransformerBridge).
    W_Q/W_K/W_V: each head's [d_model, d_head] slice (rows h*d_head:(h+1)*d_head of the
    [n_heads*d_head, d_model] Linear weight); W_O: each head's [d_head, d_model] slice (columns of the
    [d_model, n_heads*d_head] weight). attention_norm "per_head_mean": the Frobenius norm of each
    head, averaged over heads (the paper's text); "layer": the Frobenius norm of the whole layer's
    matrix, all heads together (the authors' code; config key analysis.attention_norm).
    W_in, W_out: the whole MLP matrix; ln1_w, ln2_w: the L2 norm of the LayerNorm gain.
    Matrices absent from the state dict (no MLP in attention-only models, no LayerNorm) are skipped.
    Returns columns layer (0-based), matrix, frobenius_norm (as attention_norm asks), whole_layer_norm (the
    whole layer's Frobenius norm, Table B.5's; equal to frobenius_norm for every matrix but the attention ones
    under per_head_mean).
    """
    if attention_norm not in ATTENTION_NORMS:
        raise ValueError(
            f"attention_norm must be one of {list(ATTENTION_NORMS)} (config key analysis.attention_norm); got {attention_norm!r}"
        )
    state = bridge_state(weights)
    rows = []
    for layer in range(n_layers):
        for matrix in MATRIX_ORDER:
            key = f"blocks.{layer}.{_STATE_KEYS[matrix]}"
            if key not in state:
                if matrix in ATTENTION_MATRICES:
                    raise KeyError(
                        f"state dict lacks {key!r} (needed for {matrix}); keys look like {sorted(state)[:4]}"
                    )
                continue
            w = to_numpy(state[key])
            if matrix in ATTENTION_MATRICES:
                norm, whole = _attention_norm(w, key, matrix, n_heads, d_head, attention_norm)
            else:
                norm = whole = float(np.linalg.norm(w))
            rows.append((layer, matrix, norm, whole))
    return pd.DataFrame(rows, columns=["layer", "matrix", "frobenius_norm", "whole_layer_norm"])


def head_weight_norms(weights: Mapping[str, Any] | Any, n_layers: int, n_heads: int, d_head: int) -> pd.DataFrame:
    """Every head's Frobenius norm of its W_Q, W_K, W_V and W_O slice (as `layer_weight_norms` cuts them).
    Returns columns layer, head, matrix, frobenius_norm."""
    state = bridge_state(weights)
    rows = []
    for layer in range(n_layers):
        for matrix in ATTENTION_MATRICES:
            key = f"blocks.{layer}.{_STATE_KEYS[matrix]}"
            if key not in state:
                raise KeyError(f"state dict lacks {key!r} (needed for {matrix}); keys look like {sorted(state)[:4]}")
            for head, norm in enumerate(_head_norms(to_numpy(state[key]), key, matrix, n_heads, d_head)):
                rows.append((layer, head, matrix, float(norm)))
    return pd.DataFrame(rows, columns=["layer", "head", "matrix", "frobenius_norm"])


def refit_norm_tables(
    spec: ArchitectureSpec, weights: Mapping[int, str | Path], attention_norm: str, weight_processing: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NORM_COLUMNS and HEAD_NORM_COLUMNS of every refit (weights: seed -> final.pt), each loaded once."""
    layers, heads = [], []
    for seed, path in weights.items():
        state = trained_state(spec, path, weight_processing)
        layers.append(
            layer_weight_norms(state, spec.n_layers, spec.n_heads, spec.d_head, attention_norm).assign(seed=seed)
        )
        heads.append(head_weight_norms(state, spec.n_layers, spec.n_heads, spec.d_head).assign(seed=seed))
    return pd.concat(layers, ignore_index=True)[NORM_COLUMNS], pd.concat(heads, ignore_index=True)[HEAD_NORM_COLUMNS]


def refit_weight_norms(
    spec: ArchitectureSpec,
    weights: Mapping[int, str | Path],
    attention_norm: str,
    weight_processing: Sequence[str],
) -> pd.DataFrame:
    """NORM_COLUMNS of every refit: weights maps seed -> its final.pt, in the order to report."""
    frames = [
        layer_weight_norms(
            trained_state(spec, path, weight_processing), spec.n_layers, spec.n_heads, spec.d_head, attention_norm
        ).assign(seed=seed)
        for seed, path in weights.items()
    ]
    return pd.concat(frames, ignore_index=True)[NORM_COLUMNS]


def norm_stability_correlation(
    norms: pd.DataFrame,
    layer_stability: pd.DataFrame,
    promptset: str | None,
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Pearson and Spearman correlations over layers between each weight norm and layer-wise stability.

    norms: NORM_COLUMNS (`layer_weight_norms` of each refit, with its seed added).
    layer_stability: columns (promptset, scope,) anchor_seed, layer, mean (and entropy, the mean over the
    layer's heads: then partial_r_entropy is the correlation given it, NaN under 4 layers, where nothing
    is left to correlate). Each anchor's stability is paired with that same refit's weights.
    Returns CORRELATION_COLUMNS: pearson_r and its p_value (NaN for 2 layers, where r is +-1), spearman_r,
    whole_layer_pearson_r (Pearson's r with whole_layer_norm, Table B.5's norm), n_layers, the sums of
    squares of the norm and of stability about their means over layers (norm_ss, stability_ss), from which
    `weight_norm_summary` pools r over anchors, partial_r_entropy, and for the p-values, one family over the
    table's anchors and matrices, their Benjamini-Hochberg q_value and their calibration at n_layers layers
    (`headstab.statistics.calibration`: the layers of a refit are no independent points).
    """
    if "seed" not in norms.columns:
        raise ValueError("norms needs a 'seed' column naming the refit the weights come from")
    if "whole_layer_norm" not in norms.columns:
        raise ValueError(
            "norms lacks the column whole_layer_norm (Table B.5's norm); rebuild tables/weight_norms.csv (rule weight_norms)"
        )
    stab = select_rows(layer_stability, "layer stability", promptset=promptset, scope=scope)
    stab = stab.assign(entropy=stab["entropy"] if "entropy" in stab.columns else np.nan)
    merged = norms.merge(
        stab[["anchor_seed", "layer", "mean", "entropy"]],
        left_on=["seed", "layer"],
        right_on=["anchor_seed", "layer"],
    )
    if merged.empty:
        raise ValueError(
            f"no refit appears both in norms (seeds {sorted(map(str, norms['seed'].unique()))}) and as an "
            f"anchor in layer stability (anchors {sorted(map(str, stab['anchor_seed'].unique()))})"
        )
    rows = []
    for (anchor, matrix), group in merged.groupby(["anchor_seed", "matrix"], sort=False):
        group = group.sort_values("layer")
        norm, stability, entropy = (group[c].to_numpy(float) for c in ("frobenius_norm", "mean", "entropy"))
        r, p = pearson_or_nan(norm, stability)
        whole_r, _ = pearson_or_nan(group["whole_layer_norm"].to_numpy(float), stability)
        rho, _ = pearson_or_nan(stats.rankdata(norm), stats.rankdata(stability))  # Spearman: Pearson of ranks
        norm_ss, stability_ss = ((norm - norm.mean()) ** 2).sum(), ((stability - stability.mean()) ** 2).sum()
        partial = partial_correlation(norm, stability, entropy) if len(group) >= 4 else np.nan
        label = calibration_label("pearson_t_weight_norm_layers", len(group))
        rows.append((anchor, matrix, r, p, rho, whole_r, len(group), norm_ss, stability_ss, float(partial), label))
    out = pd.DataFrame(rows, columns=[c for c in CORRELATION_COLUMNS if c != "q_value"])
    out = out.assign(q_value=benjamini_hochberg(out["p_value"].to_numpy(dtype=np.float64)))[CORRELATION_COLUMNS]
    order = {m: i for i, m in enumerate(MATRIX_ORDER)}
    out = out.assign(_order=out["matrix"].map(order)).sort_values(["anchor_seed", "_order"])
    return out.drop(columns="_order").reset_index(drop=True)


def weight_norm_summary(
    correlations: Mapping[str, pd.DataFrame],
    facts: Mapping[str, Mapping[str, Any]],
    anchor_seeds: Mapping[str, int],
    intervals: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Table B.5 across architectures: one row per (architecture, weight matrix).

    correlations: architecture -> its `norm_stability_correlation` table; facts: architecture ->
    `headstab.sections.architecture_facts`; anchor_seeds: architecture -> the paper's single anchor.
    Columns: architecture, its facts, matrix,
    - mean_pearson_r and std_pearson_r (ddof 0) over anchors, n_anchors (finite r);
    - mean_spearman_r: the mean Spearman rho over anchors (the rank correlation pooled over anchors: without
      ties every anchor's ranks have the same spread);
    - pooled_pearson_r: the repeated-measures r, Pearson's r of all anchors' layer values each centred within
      its anchor (sum_a r_a sqrt(norm_ss_a stability_ss_a) / sqrt(sum norm_ss * sum stability_ss)); n_points;
    - by_construction: True when every anchor has 2 layers, so each per-anchor r and rho is +-1;
    - mean_whole_layer_r: the mean r with the whole layer's norm (Table B.5's);
    - first_anchor_r / first_anchor_p / first_anchor_spearman_r / first_anchor_whole_layer_r: the paper's
      anchor's (NaN when that anchor has no row); first_anchor_q, its q-value in its architecture's family (NaN
      from a table without q_value), and p_calibration, how its p is labelled at the anchor's layers;
    intervals: {n_boot, seed, confidence}: adds mean_pearson_r_ci_low/high, the bootstrap interval of the
    mean r with the anchors (refits) resampled (`headstab.statistics.resampling.mean_interval`), and
    ci_calibration, its label at n_anchors (`headstab.statistics.calibration`).
    """

    nan = float("nan")
    rows = []
    for arch, table in correlations.items():
        for matrix in [m for m in MATRIX_ORDER if m in set(table["matrix"])]:
            rows_m = table[table["matrix"] == matrix]
            first = rows_m[rows_m["anchor_seed"] == anchor_seeds[arch]]
            spread = np.sqrt(rows_m["norm_ss"].to_numpy(float) * rows_m["stability_ss"].to_numpy(float))
            r = rows_m["pearson_r"].to_numpy(float)
            # An anchor with a constant norm or stability has no r; its centred values add no cross product.
            cross = np.where(np.isfinite(r), r * spread, 0.0).sum()
            scale = np.sqrt(rows_m["norm_ss"].sum() * rows_m["stability_ss"].sum())
            rows.append(
                {
                    "architecture": arch,
                    **facts[arch],
                    "matrix": matrix,
                    "mean_pearson_r": rows_m["pearson_r"].mean(),
                    "std_pearson_r": rows_m["pearson_r"].std(ddof=0),
                    "n_anchors": int(rows_m["pearson_r"].notna().sum()),
                    "mean_spearman_r": rows_m["spearman_r"].mean(),
                    "pooled_pearson_r": cross / scale if scale > 0 else nan,
                    "n_points": int(rows_m["n_layers"].sum()),
                    "by_construction": bool((rows_m["n_layers"] == 2).all()),
                    "mean_whole_layer_r": rows_m["whole_layer_pearson_r"].mean(),
                    "first_anchor_r": first["pearson_r"].iloc[0] if len(first) else nan,
                    "first_anchor_p": first["p_value"].iloc[0] if len(first) else nan,
                    "first_anchor_q": first["q_value"].iloc[0] if len(first) and "q_value" in first.columns else nan,
                    "p_calibration": calibration_label(
                        "pearson_t_weight_norm_layers", int(first["n_layers"].iloc[0]) if len(first) else 0
                    ),
                    "first_anchor_spearman_r": first["spearman_r"].iloc[0] if len(first) else nan,
                    "first_anchor_whole_layer_r": first["whole_layer_pearson_r"].iloc[0] if len(first) else nan,
                }
            )
            if "partial_r_entropy" in rows_m.columns:
                rows[-1]["mean_partial_r_entropy"] = rows_m["partial_r_entropy"].mean()
            if intervals is not None:
                low, high = mean_interval(rows_m["pearson_r"].to_numpy(), **intervals)
                rows[-1].update(
                    mean_pearson_r_ci_low=low,
                    mean_pearson_r_ci_high=high,
                    n_boot=intervals["n_boot"],
                    ci_calibration=calibration_label("anchor_bootstrap_mean_r_weight_norm", rows[-1]["n_anchors"]),
                )
    return pd.DataFrame(rows)


def head_norm_partial_table(
    head_norms: pd.DataFrame,
    head_stability: pd.DataFrame,
    *,
    promptset: str | None,
    matrices: Sequence[str] = ("W_Q",),
    n_boot: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """PARTIAL_COLUMNS: per layer and matrix, over every anchor's heads (each with its own refit's norm),
    Pearson r of head stability with the head's norm, the partial r given head entropy with a percentile
    interval over resampled anchors (refits) and its calibration at n_anchors, and r of stability with entropy.

    head_norms: HEAD_NORM_COLUMNS; head_stability: promptset, scope, anchor_seed, layer, head, stability,
    entropy (same-layer rows are read).
    """

    stab = select_rows(head_stability, "head stability", promptset=promptset, scope="same_layer")
    merged = head_norms[head_norms["matrix"].isin(matrices)].merge(
        stab[["anchor_seed", "layer", "head", "stability", "entropy"]],
        left_on=["seed", "layer", "head"],
        right_on=["anchor_seed", "layer", "head"],
    )
    rows = []
    for (layer, matrix), group in merged.groupby(["layer", "matrix"], sort=True):
        anchors, units = np.unique(group["anchor_seed"].to_numpy(), return_inverse=True)
        draws = np.random.default_rng(seed).integers(len(anchors), size=(n_boot, len(anchors)))
        counts = np.stack([np.bincount(row, minlength=len(anchors)) for row in draws])[:, units]
        x, y, z = (group[c].to_numpy(float) for c in ("frobenius_norm", "stability", "entropy"))
        replicates = partial_correlation(x, y, z, counts)
        low, high = percentile_interval(replicates, confidence) if np.isfinite(replicates).any() else (np.nan, np.nan)
        rows.append(
            (
                int(layer),
                matrix,
                len(group),
                len(anchors),
                pearson_or_nan(x, y)[0],
                float(partial_correlation(x, y, z)),
                low,
                high,
                pearson_or_nan(y, z)[0],
                n_boot,
                calibration_label("anchor_bootstrap_partial_r_weight_norm", len(anchors)),
            )
        )
    return pd.DataFrame(rows, columns=PARTIAL_COLUMNS)
