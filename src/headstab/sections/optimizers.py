"""Adam vs AdamW (paper §4.5): activation norms (Fig. 35), validation perplexity (§B.7 figures), and both as tests.

The two members of an optimizer pair, an architecture and its `_wd` member, differ only in the optimizer (AdamW,
weight decay 0.1). Their layer stability is compared in the figures (`headstab.plots.optimizers`); here are
the two checks behind the paper's explanation: the mean per-token norms of the attention output (rebuilt from the
cached `hook_z` and W_O) and of resid_mid, and the validation perplexity of every refit on held-out
text with two tests of a difference (Welch's t-test and the Brunner-Munzel rank test). A difference test
that does not reject is no evidence of parity: the paper's "performance parity" is tested by the TOST, and
the tests of both claims, paired by seed, are in `headstab.sections.optimizer_tests`.

`load_trained_model` (torch) is imported inside the functions that load a model: the comparison job
imports this module without running one, and importing torch is seconds of a job's start.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from headstab.activations.reader import open_cache
from headstab.evaluation import perplexity_from_loss, summed_token_loss
from headstab.plan.spec import ArchitectureSpec
from headstab.sections.weight_norms import bridge_state, to_numpy, trained_state
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import benjamini_hochberg

log = logging.getLogger(__name__)

ACTIVATION_NORM_COLUMNS = ["seed", "layer", "activation", "mean_norm"]
VALIDATION_COLUMNS = ["seed", "perplexity", "n_tokens"]
PERPLEXITY_COLUMNS = ["scope", "architecture", "optimizer", "seed", "statistic", "value", "q_value", "calibration"]
# The difference tests of perplexity.csv and the calibration method of each (headstab.statistics.calibration).
# The Brunner-Munzel statistic of a complete separation: beyond any finite one, with room for scipy's tolerance.
SEPARATED = 1e300
PERPLEXITY_TESTS = {"welch_p": "welch_t_perplexity", "brunner_munzel_p": "brunner_munzel_perplexity"}


def output_weights(
    weights: Mapping[str, Any] | Any, n_layers: int, n_heads: int, d_head: int
) -> tuple[np.ndarray, np.ndarray]:
    """W_O [layer, head, d_head, d_model] and b_O [layer, d_model] from a state dict (as `final.pt`).

    weights: state dict with `blocks.{l}.attn.o.weight` [d_model, n_heads*d_head] and `.bias`, or an
    object with `.state_dict()`. Same layout as TransformerLens' `model.W_O` / `model.b_O`.
    """
    state = bridge_state(weights)
    w_list, b_list = [], []
    for layer in range(n_layers):
        key = f"blocks.{layer}.attn.o"
        if f"{key}.weight" not in state:
            raise KeyError(f"state dict lacks {key}.weight; keys look like {sorted(state)[:4]}")
        w = to_numpy(state[f"{key}.weight"])
        if w.shape[1] != n_heads * d_head:
            raise ValueError(f"{key}.weight has shape {w.shape}; expected [d_model, {n_heads * d_head}]")
        w_list.append(w.T.reshape(n_heads, d_head, w.shape[0]))
        bias = state.get(f"{key}.bias")
        b_list.append(np.zeros(w.shape[0]) if bias is None else to_numpy(bias))
    return np.stack(w_list).astype(np.float32), np.stack(b_list).astype(np.float32)


def _real_mask(lengths: np.ndarray, n_pos: int) -> np.ndarray:
    """[prompt, pos] True at real tokens."""
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.max(initial=0) > n_pos or lengths.min(initial=0) < 0:
        raise ValueError(f"lengths must be [prompt] with values in [0, {n_pos}], got {lengths}")
    return np.arange(n_pos)[None, :] < lengths[:, None]


def attention_output_from_z(
    hook_z: np.ndarray, W_O: np.ndarray, b_O: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Attention sub-layer output from the cached `hook_z`.

    hook_z: [layer, prompt, pos, head, d_head] (`attn.hook_z`, zero-padded);
    W_O: [layer, head, d_head, d_model]; b_O: [layer, d_model]; lengths: [prompt], to keep padding
    positions at zero (the bias would otherwise fill them).
    Returns [layer, prompt, pos, d_model] = sum_h z_h W_O[h] + b_O (`hook_attn_out`).
    """
    hook_z = np.asarray(hook_z)
    W_O, b_O = np.asarray(W_O), np.asarray(b_O)
    if hook_z.ndim != 5 or W_O.shape[:3] != (hook_z.shape[0], hook_z.shape[3], hook_z.shape[4]):
        raise ValueError(
            f"hook_z {hook_z.shape} [layer, prompt, pos, head, d_head] and W_O {W_O.shape} "
            "[layer, head, d_head, d_model] disagree"
        )
    if b_O.shape != (W_O.shape[0], W_O.shape[3]):
        raise ValueError(f"b_O must be [layer, d_model] = {(W_O.shape[0], W_O.shape[3])}, got {b_O.shape}")
    out = np.einsum("lpshd,lhdm->lpsm", hook_z, W_O, dtype=np.float32) + b_O[:, None, None, :]
    if lengths is not None:
        out[:, ~_real_mask(lengths, hook_z.shape[2])] = 0.0
    return out.astype(np.float32, copy=False)


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


def activation_norms(attn_out: np.ndarray, resid_mid: np.ndarray, lengths: np.ndarray) -> pd.DataFrame:
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


def refit_activation_norms(
    cache: Any, state: Mapping[str, Any], promptset: str, spec: ArchitectureSpec
) -> pd.DataFrame:
    """Mean per-token norms of one refit from its open cache (a `headstab.activations.reader` reader)
    and its weights, one layer at a time (attention output rebuilt from hook_z and W_O)."""
    W_O, b_O = output_weights(state, spec.n_layers, spec.n_heads, spec.d_head)
    lengths = cache.lengths(promptset)
    frames = []
    for layer in range(cache.n_layers):
        hook_z = cache.hook_z(promptset, layer=layer)[None]  # [1, prompt, pos, head, d_head]
        attn_out = attention_output_from_z(hook_z, W_O[layer : layer + 1], b_O[layer : layer + 1], lengths)
        resid_mid = cache.resid(promptset, "hook_resid_mid", layer=layer)[None]
        frames.append(activation_norms(attn_out, resid_mid, lengths).assign(layer=layer))
    return pd.concat(frames, ignore_index=True)


def activation_norm_table(
    spec: ArchitectureSpec,
    refits: Mapping[int, tuple[str | Path, str | Path]],
    promptset: str,
    weight_processing: Sequence[str],
) -> pd.DataFrame:
    """ACTIVATION_NORM_COLUMNS of every refit: refits maps seed -> (final.pt, cache), in report order."""

    frames = []
    for seed, (weights, cache_path) in refits.items():
        state = trained_state(spec, weights, weight_processing)
        with open_cache(cache_path) as cache:
            frames.append(refit_activation_norms(cache, state, promptset, spec).assign(seed=seed))
    return pd.concat(frames, ignore_index=True)[ACTIVATION_NORM_COLUMNS]


def validation_perplexity_table(
    spec: ArchitectureSpec,
    weights: Mapping[int, str | Path],
    windows: np.ndarray,
    device: str,
    batch_size: int,
    weight_processing: Sequence[str],
) -> pd.DataFrame:
    """VALIDATION_COLUMNS: every refit's perplexity over the held-out windows ([window, seq_len], from
    `headstab.evaluation.heldout_windows`); n_tokens counts the predicted tokens."""

    # torch loads here, not at import: the comparison jobs that import this module load no model
    from headstab.refits.models import load_trained_model

    lengths = np.full(len(windows), windows.shape[1])
    rows = []
    for seed, path in weights.items():
        # Checked against its meta.json's sha256; processed as the caches were (analysis.weight_processing).
        model = load_trained_model(spec, path, device, weight_processing=weight_processing)
        total, count = summed_token_loss(model, windows, lengths, batch_size=batch_size)
        rows.append((seed, perplexity_from_loss(total, count), count))
        log.info("seed %d: validation perplexity %.3f over %d predicted tokens", seed, rows[-1][1], count)
    return pd.DataFrame(rows, columns=VALIDATION_COLUMNS)


def _brunner_munzel(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """The Brunner-Munzel statistic of b against a; a complete separation (an infinite statistic) is the most
    extreme split, a split without spread in either group (NaN) none."""
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's p of a split without spread: unused here
        w = stats.brunnermunzel(a, b, axis=axis).statistic
    return np.nan_to_num(w, nan=0.0, posinf=SEPARATED, neginf=-SEPARATED)


def brunner_munzel_test(a: np.ndarray, b: np.ndarray, permutations: int, seed: int) -> tuple[float, float]:
    """(W, p): the Brunner-Munzel statistic of b against a and its two-sided studentized permutation p (Neubert
    & Brunner 2007): the labels permuted over every split when there are at most `permutations`, else over
    `permutations` random ones. Its null is P(a < b) = P(a > b), whatever the two spreads; the permutation keeps
    it exact when the refits are exchangeable and valid for unequal spreads as the refits grow."""
    result = stats.permutation_test(
        (a, b), _brunner_munzel, vectorized=True, n_resamples=permutations, rng=np.random.default_rng(seed)
    )
    return float(_brunner_munzel(a, b)), float(result.pvalue)


def perplexity_comparison(
    ppl_adam: np.ndarray, ppl_adamw: np.ndarray, permutations: int = 10000, seed: int = 0
) -> dict[str, float]:
    """Two difference tests of the Adam and AdamW refits' validation perplexities (§4.5, §B.7 figures).

    ppl_adam: [seed], ppl_adamw: [seed] validation perplexities; permutations, seed: the rank test's.
    Returns mean/std (ddof 1) of each, their difference (AdamW - Adam), Welch's two-sided t and p, and the
    Brunner-Munzel statistic W and its two-sided permutation p (`brunner_munzel_test`). Neither is a test of
    parity: the TOST of `headstab.sections.optimizer_tests` is.
    """
    a, b = np.asarray(ppl_adam, dtype=float), np.asarray(ppl_adamw, dtype=float)
    if a.ndim != 1 or b.ndim != 1 or len(a) < 2 or len(b) < 2:
        raise ValueError(f"need at least two refits per optimizer, got {a.shape} (Adam) and {b.shape} (AdamW)")
    welch = stats.ttest_ind(a, b, equal_var=False)
    w, p = brunner_munzel_test(a, b, permutations, seed)
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
        "brunner_munzel_w": w,
        "brunner_munzel_p": p,
    }


def pair_frame(adam: pd.DataFrame, adamw: pd.DataFrame) -> pd.DataFrame:
    """The two members' tables stacked, with an optimizer column ('Adam' | 'AdamW')."""
    return pd.concat([adam.assign(optimizer="Adam"), adamw.assign(optimizer="AdamW")], ignore_index=True)


def perplexity_table(ppl: pd.DataFrame, comparison: Mapping[str, float], arch_of: Mapping[str, str]) -> pd.DataFrame:
    """The perplexity comparison (§B.7 figures) long and tidy: one value per row, PERPLEXITY_COLUMNS.

    ppl: optimizer, seed, perplexity of every refit (`pair_frame` of the validation perplexities);
    comparison: `perplexity_comparison`; arch_of: 'Adam' | 'AdamW' -> architecture. scope is
    `refit` (statistic perplexity, seed set), `optimizer` (mean, std ddof 1, n over one member's
    refits; seed empty) or `comparison` (architecture "{adam} vs {adamw}", optimizer "AdamW - Adam":
    difference of means, welch_t, welch_p, brunner_munzel_w, brunner_munzel_p, all two-sided).
    The two p-values are one family: `q_value` is their Benjamini-Hochberg q-value, and `calibration` says
    whether each test is calibrated at the smaller member's number of refits
    (`headstab.statistics.calibration`); both are empty on every other row.
    """
    rows = [
        ("refit", arch_of[r.optimizer], r.optimizer, r.seed, "perplexity", r.perplexity)
        for r in ppl.itertuples(index=False)
    ]
    for optimizer, suffix in (("Adam", "adam"), ("AdamW", "adamw")):
        rows += [
            ("optimizer", arch_of[optimizer], optimizer, None, stat, comparison[f"{stat}_{suffix}"])
            for stat in ("mean", "std", "n")
        ]
    pair = f"{arch_of['Adam']} vs {arch_of['AdamW']}"
    rows += [
        ("comparison", pair, "AdamW - Adam", None, stat, comparison[stat])
        for stat in ("difference", "welch_t", "welch_p", "brunner_munzel_w", "brunner_munzel_p")
    ]
    table = pd.DataFrame(rows, columns=PERPLEXITY_COLUMNS[:6]).astype({"seed": "Int64"})
    tests = table.index[table["statistic"].isin(PERPLEXITY_TESTS)]
    n = min(int(comparison["n_adam"]), int(comparison["n_adamw"]))
    table["q_value"] = np.nan
    table.loc[tests, "q_value"] = benjamini_hochberg(table.loc[tests, "value"].to_numpy(dtype=np.float64))
    table["calibration"] = table["statistic"].map(
        {statistic: calibration_label(method, n) for statistic, method in PERPLEXITY_TESTS.items()}
    )
    return table
