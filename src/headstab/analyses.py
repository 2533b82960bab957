"""Analyses of §4.4-4.6: weight norms, prompt length, Adam vs AdamW, stability gap.

Inputs are arrays shaped like the activation cache (issue 3) and the stability tables
(`layer_stability.csv`: promptset, scope, anchor_seed, layer, mean, std; `layer` 0-based).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

log = logging.getLogger(__name__)

ATTENTION_MATRICES = ("W_Q", "W_K", "W_V", "W_O")
MATRIX_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w")

# Linear-layer names in the bridge state dict (`blocks.{l}.attn.q.weight`, nn.Linear layout
# [out_features, in_features]).
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


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().float().numpy()
    return np.asarray(value, dtype=np.float64)


ATTENTION_NORMS = ("per_head_mean", "layer")


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
    if hasattr(weights, "state_dict") and not isinstance(weights, Mapping):
        weights = weights.state_dict()
    state = {_normalise_key(k): v for k, v in weights.items()}
    rows = []
    for layer in range(n_layers):
        for matrix in MATRIX_ORDER:
            key = f"blocks.{layer}.{_STATE_KEYS[matrix]}"
            if key not in state:
                if matrix in ATTENTION_MATRICES:
                    raise KeyError(
                        f"state dict lacks {key!r} (needed for {matrix}); keys look like "
                        f"{sorted(state)[:4]}"
                    )
                continue
            w = _to_numpy(state[key])
            if matrix in ATTENTION_MATRICES:
                expected = (n_heads * d_head,)
                per_head_axis = 1 if matrix == "W_O" else 0
                if w.ndim != 2 or w.shape[per_head_axis] != expected[0]:
                    raise ValueError(
                        f"{key} has shape {w.shape}; expected n_heads*d_head = {expected[0]} "
                        f"along axis {per_head_axis} (n_heads={n_heads}, d_head={d_head})"
                    )
                if per_head_axis == 1:
                    w = w.T
                heads = w.reshape(n_heads, d_head, -1)
                per_head = np.sqrt((heads**2).sum(axis=(1, 2)))
                norm = float(per_head.mean() if attention_norm == "per_head_mean" else np.sqrt((per_head**2).sum()))
            else:
                norm = float(np.linalg.norm(w))
            rows.append((layer, matrix, norm))
    return pd.DataFrame(rows, columns=["layer", "matrix", "frobenius_norm"])


def _select(
    table: pd.DataFrame, promptset: str | None, scope: str | None, what: str
) -> pd.DataFrame:
    """Filter a stability table to one prompt set and scope; refuse ambiguous tables."""
    for column, value in (("promptset", promptset), ("scope", scope)):
        if column not in table.columns:
            continue
        if value is not None:
            table = table[table[column] == value]
        elif table[column].nunique() > 1:
            raise ValueError(
                f"{what} holds several {column}s {sorted(table[column].unique())}; pass {column}="
            )
    if table.empty:
        raise ValueError(f"{what} has no rows for promptset={promptset!r}, scope={scope!r}")
    return table


def pearson_or_nan(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson (r, p); NaN where undefined (the ablation and weight-norm correlations share it)."""
    # Undefined for < 2 points or a constant variable; with 2 points r = +-1 and p is meaningless.
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    if len(x) == 2:
        return float(np.sign(np.corrcoef(x, y)[0, 1])), math.nan
    res = stats.pearsonr(x, y)
    return float(res.statistic), float(res.pvalue)


def norm_stability_correlation(
    norms: pd.DataFrame,
    layer_stability: pd.DataFrame,
    promptset: str | None = "primary",
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Pearson correlation over layers between each weight norm and layer-wise stability.

    norms: columns seed, layer, matrix, frobenius_norm (`layer_weight_norms` of each refit,
    with its seed added). layer_stability: columns (promptset, scope,) anchor_seed, layer, mean.
    Each anchor's stability is paired with that same refit's weights.
    Returns columns anchor_seed, matrix, pearson_r, p_value, n_layers (p is NaN for 2 layers).
    """
    if "seed" not in norms.columns:
        raise ValueError("norms needs a 'seed' column naming the refit the weights come from")
    stab = _select(layer_stability, promptset, scope, "layer stability")
    merged = norms.merge(
        stab[["anchor_seed", "layer", "mean"]],
        left_on=["seed", "layer"],
        right_on=["anchor_seed", "layer"],
    )
    if merged.empty:
        raise ValueError(
            f"no refit appears both in norms (seeds {sorted(norms['seed'].unique())}) and as an "
            f"anchor in layer stability (anchors {sorted(stab['anchor_seed'].unique())})"
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


def prompt_length_of(promptset: str) -> int | None:
    """`len20` -> 20; other prompt-set names -> None."""
    match = re.fullmatch(r"len(\d+)", promptset)
    return int(match.group(1)) if match else None


def prompt_length_table(
    layer_stability: pd.DataFrame | Mapping[str, pd.DataFrame],
    anchor_seed: int | None = None,
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Layer-wise stability of the `len{N}` prompt sets (§4.4.2, Fig. 5/B.4).

    layer_stability: a table with a promptset column, or a mapping promptset -> table.
    anchor_seed: the anchor to report; None takes the first (smallest) seed, the paper's
    single-anchor view.
    Returns columns prompt_length, layer (0-based), mean, std, anchor_seed, sorted by length and layer.
    """
    if isinstance(layer_stability, Mapping):
        layer_stability = pd.concat(
            [t.assign(promptset=name) for name, t in layer_stability.items()], ignore_index=True
        )
    lengths = layer_stability["promptset"].map(prompt_length_of)
    table = layer_stability[lengths.notna()].assign(prompt_length=lengths[lengths.notna()])
    if table.empty:
        raise ValueError(
            "no len{N} prompt sets in layer stability (found "
            f"{sorted(layer_stability['promptset'].unique())}); enable the length_sweep prompt set"
        )
    if scope is not None and "scope" in table.columns:
        table = table[table["scope"] == scope]
    if anchor_seed is None:
        anchor_seed = int(table["anchor_seed"].min())
    table = table[table["anchor_seed"] == anchor_seed]
    if table.empty:
        raise ValueError(f"no layer stability rows for anchor_seed={anchor_seed}, scope={scope!r}")
    out = table[["prompt_length", "layer", "mean", "std", "anchor_seed"]].astype(
        {"prompt_length": int, "layer": int}
    )
    return out.sort_values(["prompt_length", "layer"]).reset_index(drop=True)


def output_weights(
    weights: Mapping[str, Any] | Any, n_layers: int, n_heads: int, d_head: int
) -> tuple[np.ndarray, np.ndarray]:
    """W_O [layer, head, d_head, d_model] and b_O [layer, d_model] from a state dict (as `final.pt`).

    weights: state dict with `blocks.{l}.attn.o.weight` [d_model, n_heads*d_head] and `.bias`, or an
    object with `.state_dict()`. Same layout as TransformerLens' `model.W_O` / `model.b_O`.
    """
    if hasattr(weights, "state_dict") and not isinstance(weights, Mapping):
        weights = weights.state_dict()
    state = {_normalise_key(k): v for k, v in weights.items()}
    w_list, b_list = [], []
    for layer in range(n_layers):
        key = f"blocks.{layer}.attn.o"
        if f"{key}.weight" not in state:
            raise KeyError(f"state dict lacks {key}.weight; keys look like {sorted(state)[:4]}")
        w = _to_numpy(state[f"{key}.weight"])
        if w.shape[1] != n_heads * d_head:
            raise ValueError(f"{key}.weight has shape {w.shape}; expected [d_model, {n_heads * d_head}]")
        w_list.append(w.T.reshape(n_heads, d_head, w.shape[0]))
        bias = state.get(f"{key}.bias")
        b_list.append(np.zeros(w.shape[0]) if bias is None else _to_numpy(bias))
    return np.stack(w_list).astype(np.float32), np.stack(b_list).astype(np.float32)


def attention_output_from_z(
    head_out: np.ndarray, W_O: np.ndarray, b_O: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Attention sub-layer output from the cached `hook_z`.

    head_out: [layer, prompt, pos, head, d_head] (`attn.hook_z`, zero-padded);
    W_O: [layer, head, d_head, d_model]; b_O: [layer, d_model]; lengths: [prompt], to keep padding
    positions at zero (the bias would otherwise fill them).
    Returns [layer, prompt, pos, d_model] = sum_h z_h W_O[h] + b_O (`hook_attn_out`).
    """
    head_out = np.asarray(head_out)
    W_O, b_O = np.asarray(W_O), np.asarray(b_O)
    if head_out.ndim != 5 or W_O.shape[:3] != (head_out.shape[0], head_out.shape[3], head_out.shape[4]):
        raise ValueError(
            f"head_out {head_out.shape} [layer, prompt, pos, head, d_head] and W_O {W_O.shape} "
            "[layer, head, d_head, d_model] disagree"
        )
    if b_O.shape != (W_O.shape[0], W_O.shape[3]):
        raise ValueError(f"b_O must be [layer, d_model] = {(W_O.shape[0], W_O.shape[3])}, got {b_O.shape}")
    out = np.einsum("lpshd,lhdm->lpsm", head_out, W_O, dtype=np.float32) + b_O[:, None, None, :]
    if lengths is not None:
        out[:, ~_real_mask(lengths, head_out.shape[2])] = 0.0
    return out.astype(np.float32, copy=False)


def _real_mask(lengths: np.ndarray, n_pos: int) -> np.ndarray:
    """[prompt, pos] True at real tokens."""
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.max(initial=0) > n_pos or lengths.min(initial=0) < 0:
        raise ValueError(f"lengths must be [prompt] with values in [0, {n_pos}], got {lengths}")
    return np.arange(n_pos)[None, :] < lengths[:, None]


def mean_token_norm(acts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean per-token L2 norm over real tokens of all prompts.

    acts: [layer, prompt, pos, d_model] zero-padded; lengths: [prompt]. Returns [layer].
    """
    acts = np.asarray(acts)
    if acts.ndim != 4 or acts.shape[1] != len(lengths):
        raise ValueError(f"acts must be [layer, prompt, pos, d_model] with {len(lengths)} prompts, got {acts.shape}")
    real = _real_mask(lengths, acts.shape[2])
    norms = np.linalg.norm(acts.astype(np.float64), axis=-1)  # [layer, prompt, pos]
    return norms[:, real].mean(axis=1)


def activation_norms(
    attn_out: np.ndarray, resid_mid: np.ndarray, lengths: np.ndarray
) -> pd.DataFrame:
    """Mechanistic check of §4.5: mean per-token L2 norm per layer, padding excluded.

    attn_out: [layer, prompt, pos, d_model] attention output (see `attention_output_from_z`; the
    cache stores only `hook_z`); resid_mid: [layer, prompt, pos, d_model]; lengths: [prompt].
    Returns columns layer (0-based), activation ('attn_out' | 'resid_mid'), mean_norm.
    """
    frames = []
    for name, acts in (("attn_out", attn_out), ("resid_mid", resid_mid)):
        norms = mean_token_norm(acts, lengths)
        frames.append(pd.DataFrame({"layer": np.arange(len(norms)), "activation": name, "mean_norm": norms}))
    return pd.concat(frames, ignore_index=True)


def perplexity_comparison(ppl_adam: np.ndarray, ppl_adamw: np.ndarray) -> dict[str, float]:
    """Performance parity of Adam and AdamW refits (§4.5).

    ppl_adam: [seed], ppl_adamw: [seed] validation perplexities.
    Returns mean/std (ddof 1) of each, their difference (AdamW - Adam), Welch's two-sided t and p,
    and the two-sided Mann-Whitney U p-value.
    """
    a, b = np.asarray(ppl_adam, dtype=float), np.asarray(ppl_adamw, dtype=float)
    if a.ndim != 1 or b.ndim != 1 or len(a) < 2 or len(b) < 2:
        raise ValueError(
            f"need at least two refits per optimizer, got {a.shape} (Adam) and {b.shape} (AdamW)"
        )
    welch = stats.ttest_ind(a, b, equal_var=False)
    mwu = stats.mannwhitneyu(a, b, alternative="two-sided")
    return {
        "mean_adam": float(a.mean()),
        "std_adam": float(a.std(ddof=1)),
        "n_adam": len(a),
        "mean_adamw": float(b.mean()),
        "std_adamw": float(b.std(ddof=1)),
        "n_adamw": len(b),
        "difference": float(b.mean() - a.mean()),
        "welch_t": float(welch.statistic),
        "welch_p": float(welch.pvalue),
        "mannwhitney_u": float(mwu.statistic),
        "mannwhitney_p": float(mwu.pvalue),
    }


def stability_gap_table(
    layer_stability: pd.DataFrame,
    n_layers: int,
    promptset: str | None = "primary",
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """Stability gap and position of the extreme layers per anchor (§4.6, Fig. 7-8).

    layer_stability: columns (promptset, scope,) anchor_seed, layer (0-based), mean.
    Returns columns anchor_seed, s_max, s_min, delta_s = S_lmax - S_lmin, l_max, l_min (1-based, as
    the paper counts), r_max = l_max / L, r_min = l_min / L. Ties go to the shallowest layer.
    """
    table = _select(layer_stability, promptset, scope, "layer stability")
    rows = []
    for anchor, group in table.groupby("anchor_seed", sort=True):
        layers = group["layer"].to_numpy(int)
        if sorted(layers) != list(range(n_layers)):
            raise ValueError(
                f"anchor {anchor} has layers {sorted(layers)} but the architecture has {n_layers}"
            )
        means = group.set_index("layer")["mean"].sort_index().to_numpy(float)
        i_max, i_min = int(np.argmax(means)), int(np.argmin(means))
        l_max, l_min = i_max + 1, i_min + 1
        rows.append(
            (anchor, means[i_max], means[i_min], means[i_max] - means[i_min],
             l_max, l_min, l_max / n_layers, l_min / n_layers)
        )
    return pd.DataFrame(
        rows,
        columns=["anchor_seed", "s_max", "s_min", "delta_s", "l_max", "l_min", "r_max", "r_min"],
    )
