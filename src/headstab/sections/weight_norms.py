"""Weight norms vs layer stability (paper §4.4.1, Table B.5).

Each refit's per-layer weight norms (W_Q, W_K, W_V, W_O, MLP W_in/W_out, LayerNorm gains) from its
`final.pt`, processed as the caches were (config key analysis.weight_processing); their Pearson
correlation over layers with that refit's layer stability as anchor; and Table B.5 across
architectures. Layers are 0-based.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headstab.plan.spec import ArchitectureSpec
from headstab.table_rows import pearson_or_nan, select_rows

ATTENTION_MATRICES = ("W_Q", "W_K", "W_V", "W_O")
MATRIX_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")
ATTENTION_NORMS = ("per_head_mean", "layer")
NORM_COLUMNS = ["seed", "layer", "matrix", "frobenius_norm"]

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
    from headstab.refits.models import load_trained_model

    model = load_trained_model(spec, weights_path, "cpu", weight_processing=weight_processing)
    return {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}


def _attention_norm(w: np.ndarray, key: str, matrix: str, n_heads: int, d_head: int, attention_norm: str) -> float:
    """Norm of one attention matrix: per head, then averaged or combined over heads."""
    per_head_axis = 1 if matrix == "W_O" else 0
    if w.ndim != 2 or w.shape[per_head_axis] != n_heads * d_head:
        raise ValueError(
            f"{key} has shape {w.shape}; expected n_heads*d_head = {n_heads * d_head} "
            f"along axis {per_head_axis} (n_heads={n_heads}, d_head={d_head})"
        )
    if per_head_axis == 1:
        w = w.T
    heads = w.reshape(n_heads, d_head, -1)
    per_head = np.sqrt((heads**2).sum(axis=(1, 2)))
    return float(per_head.mean() if attention_norm == "per_head_mean" else np.sqrt((per_head**2).sum()))


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
    Returns columns layer (0-based), matrix, frobenius_norm.
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
                norm = _attention_norm(w, key, matrix, n_heads, d_head, attention_norm)
            else:
                norm = float(np.linalg.norm(w))
            rows.append((layer, matrix, norm))
    return pd.DataFrame(rows, columns=["layer", "matrix", "frobenius_norm"])


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
    promptset: str | None = "primary",
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Pearson correlation over layers between each weight norm and layer-wise stability.

    norms: NORM_COLUMNS (`layer_weight_norms` of each refit, with its seed added).
    layer_stability: columns (promptset, scope,) anchor_seed, layer, mean.
    Each anchor's stability is paired with that same refit's weights.
    Returns columns anchor_seed, matrix, pearson_r, p_value, n_layers (p is NaN for 2 layers).
    """
    if "seed" not in norms.columns:
        raise ValueError("norms needs a 'seed' column naming the refit the weights come from")
    stab = select_rows(layer_stability, "layer stability", promptset=promptset, scope=scope)
    merged = norms.merge(
        stab[["anchor_seed", "layer", "mean"]],
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
        r, p = pearson_or_nan(group["frobenius_norm"].to_numpy(), group["mean"].to_numpy())
        rows.append((anchor, matrix, r, p, len(group)))
    out = pd.DataFrame(rows, columns=["anchor_seed", "matrix", "pearson_r", "p_value", "n_layers"])
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
    Columns: architecture, its facts, matrix, mean_pearson_r and std_pearson_r (ddof 0) over anchors,
    n_anchors (finite r), first_anchor_r / first_anchor_p (NaN when that anchor has no row).
    intervals: {n_boot, seed, confidence}: adds mean_pearson_r_ci_low/high, the bootstrap interval of the
    mean r with the anchors (refits) resampled (`headstab.statistics.resampling.mean_interval`).
    """
    from headstab.statistics.resampling import mean_interval

    rows = []
    for arch, table in correlations.items():
        for matrix in [m for m in MATRIX_ORDER if m in set(table["matrix"])]:
            rows_m = table[table["matrix"] == matrix]
            first = rows_m[rows_m["anchor_seed"] == anchor_seeds[arch]]
            rows.append(
                {
                    "architecture": arch,
                    **facts[arch],
                    "matrix": matrix,
                    "mean_pearson_r": rows_m["pearson_r"].mean(),
                    "std_pearson_r": rows_m["pearson_r"].std(ddof=0),
                    "n_anchors": int(rows_m["pearson_r"].notna().sum()),
                    "first_anchor_r": first["pearson_r"].iloc[0] if len(first) else float("nan"),
                    "first_anchor_p": first["p_value"].iloc[0] if len(first) else float("nan"),
                }
            )
            if intervals is not None:
                low, high = mean_interval(rows_m["pearson_r"].to_numpy(), **intervals)
                rows[-1].update(mean_pearson_r_ci_low=low, mean_pearson_r_ci_high=high, n_boot=intervals["n_boot"])
    return pd.DataFrame(rows)
