"""Head ablation importance (paper §4.8, Fig. 10/B.9).

Zero one head's `blocks.{layer}.attn.hook_z` at a time, measure perplexity on a prompt set, and
relate the increase in perplexity to that head's stability.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import stats
from tqdm.auto import tqdm

from headstab.analyses import pearson_or_nan

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

Hook = tuple[str, Callable[..., Any]]


def _as_tensors(tokens: Any, lengths: Any) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    tokens_t = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    lengths_t = torch.as_tensor(np.asarray(lengths), dtype=torch.long)
    if tokens_t.ndim != 2:
        raise ValueError(f"tokens must be [prompt, pos], got shape {tuple(tokens_t.shape)}")
    if lengths_t.shape != (tokens_t.shape[0],):
        raise ValueError(
            f"lengths must be [prompt] = ({tokens_t.shape[0]},), got {tuple(lengths_t.shape)}"
        )
    if (lengths_t < 2).any() or (lengths_t > tokens_t.shape[1]).any():
        bad = int(torch.nonzero((lengths_t < 2) | (lengths_t > tokens_t.shape[1]))[0, 0])
        raise ValueError(
            f"prompt {bad} has length {int(lengths_t[bad])}; every prompt needs 2..{tokens_t.shape[1]} "
            "tokens to have at least one next-token prediction"
        )
    return tokens_t, lengths_t


def summed_token_loss(
    model: Any,
    tokens: Any,
    lengths: Any,
    fwd_hooks: Sequence[Hook] = (),
    batch_size: int = 16,
) -> tuple[float, int]:
    """Sum of next-token cross-entropy over real positions, and how many there are.

    tokens: [prompt, pos] right-padded token ids; lengths: [prompt] real tokens per prompt.
    Each batch is cut to its longest prompt; position t of prompt p predicts token t+1 and counts
    only when t + 1 < lengths[p]. With right padding and causal attention, real positions never
    see padding, so no attention mask is needed. Returns (sum of losses in nats, number of predictions).
    """
    import torch  # lazily: the table functions below need no torch

    tokens_t, lengths_t = _as_tensors(tokens, lengths)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, tokens_t.shape[0], batch_size):
            batch_len = lengths_t[start : start + batch_size]
            width = int(batch_len.max())
            batch = tokens_t[start : start + batch_size, :width].to(device)
            if fwd_hooks:
                logits = model.run_with_hooks(batch, fwd_hooks=list(fwd_hooks), return_type="logits")
            else:
                logits = model(batch, return_type="logits")
            log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            target_lp = log_probs.gather(-1, batch[:, 1:, None])[..., 0]  # [batch, pos-1]
            real = torch.arange(width - 1, device=device)[None, :] < (batch_len.to(device)[:, None] - 1)
            total += float(-target_lp[real].sum())
            count += int(real.sum())
    return total, count


def perplexity(
    model: Any,
    tokens: Any,
    lengths: Any,
    fwd_hooks: Sequence[Hook] = (),
    batch_size: int = 16,
) -> float:
    """exp(mean next-token loss) over the real tokens of all prompts.

    tokens: [prompt, pos] right-padded ids; lengths: [prompt]. fwd_hooks as for
    `model.run_with_hooks`.
    """
    total, count = summed_token_loss(model, tokens, lengths, fwd_hooks, batch_size)
    return perplexity_from_loss(total, count)


# exp() of a mean loss above this overflows float64.
MAX_MEAN_LOSS = math.log(np.finfo(np.float64).max)


def perplexity_from_loss(total: float, count: int) -> float:
    """exp(total / count): the perplexity of `count` predictions whose losses sum to `total` nats.

    A mean loss too large for exp (a diverged model; training stops before this) or a non-finite
    one fails with the value, instead of an unexplained math range error or an infinite perplexity.
    """
    mean = total / count
    if not math.isfinite(mean) or mean > MAX_MEAN_LOSS:
        raise ValueError(
            f"mean next-token loss is {mean:.4g} nats over {count} predictions: the perplexity overflows, so the "
            "model has diverged; check its train_log.csv and retrain with a lower learning rate"
        )
    return math.exp(mean)


def zero_head_hook(head: int) -> Callable[..., torch.Tensor]:
    """A forward hook on `attn.hook_z` ([batch, pos, head, d_head]) that zeroes one head."""

    def hook(z: torch.Tensor, hook: Any = None) -> torch.Tensor:
        z = z.clone()
        z[:, :, head, :] = 0.0
        return z

    return hook


def head_ablation_perplexities(
    model: Any,
    tokens: Any,
    lengths: Any,
    batch_size: int = 16,
    progress: bool = True,
) -> np.ndarray:
    """Perplexity with each head's `blocks.{layer}.attn.hook_z` zeroed in turn.

    tokens: [prompt, pos] right-padded ids; lengths: [prompt].
    Returns [layer, head] perplexities. The model is put in eval mode.
    """
    model.eval()
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    out = np.empty((n_layers, n_heads))
    pairs = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    for layer, head in tqdm(pairs, desc="head ablation", disable=not progress):
        hooks = [(f"blocks.{layer}.attn.hook_z", zero_head_hook(head))]
        out[layer, head] = perplexity(model, tokens, lengths, hooks, batch_size)
    return out


def ablation_table(
    ppl_ablated: np.ndarray,
    ppl_baseline: float,
    head_stability: pd.DataFrame,
    seed: int,
    promptset: str | None = None,
    scope: str | None = "same_layer",
) -> pd.DataFrame:
    """One row per head of the anchor refit: its ablated perplexity, ΔPPL and stability.

    ppl_ablated: [layer, head] from `head_ablation_perplexities`; ppl_baseline: unablated perplexity.
    head_stability: columns (promptset, scope,) anchor_seed, layer, head, stability; rows with
    anchor_seed == seed (and the given promptset / scope, where those columns exist) are used.
    Returns columns seed, layer, head, ppl_ablated, delta_ppl, stability.
    """
    ppl_ablated = np.asarray(ppl_ablated, dtype=float)
    if ppl_ablated.ndim != 2:
        raise ValueError(f"ppl_ablated must be [layer, head], got shape {ppl_ablated.shape}")
    chosen = head_stability[head_stability["anchor_seed"] == seed]
    for column, value in (("promptset", promptset), ("scope", scope)):
        if value is not None and column in chosen.columns:
            chosen = chosen[chosen[column] == value]
    if chosen.empty:
        raise ValueError(
            f"head stability has no rows for anchor_seed={seed}, promptset={promptset}, "
            f"scope={scope}; available anchors: {sorted(head_stability['anchor_seed'].unique())}"
        )
    if chosen.duplicated(["layer", "head"]).any():
        raise ValueError(
            "head stability has several rows per (layer, head) for this anchor; pass promptset "
            "and scope to pick one"
        )
    n_layers, n_heads = ppl_ablated.shape
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    table = pd.DataFrame(
        {
            "seed": seed,
            "layer": layer.ravel(),
            "head": head.ravel(),
            "ppl_ablated": ppl_ablated.ravel(),
            "delta_ppl": ppl_ablated.ravel() - ppl_baseline,
        }
    )
    table = table.merge(
        chosen[["layer", "head", "stability"]].astype({"layer": int, "head": int}),
        on=["layer", "head"],
        how="left",
    )
    if table["stability"].isna().any():
        missing = table.loc[table["stability"].isna(), ["layer", "head"]].head(3).values.tolist()
        raise ValueError(f"head stability lacks (layer, head) {missing} for anchor_seed={seed}")
    return table


def ablation_correlation(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per layer Pearson correlation between head stability and ΔPPL, and its trend over depth.

    table: columns layer, stability, delta_ppl (as from `ablation_table`; one seed).
    Returns (per-layer DataFrame with columns layer, pearson_r, p_value, n_heads;
    trend dict with slope, intercept of r against 0-based layer, fitted over layers with finite r,
    plus their r_value and p_value; NaN when fewer than 2 layers have a finite r).
    """
    rows = []
    for layer, group in table.groupby("layer", sort=True):
        r, p = pearson_or_nan(group["stability"].to_numpy(float), group["delta_ppl"].to_numpy(float))
        rows.append((int(layer), r, p, len(group)))
    per_layer = pd.DataFrame(rows, columns=["layer", "pearson_r", "p_value", "n_heads"])
    finite = per_layer[np.isfinite(per_layer["pearson_r"])]
    trend = {"slope": math.nan, "intercept": math.nan, "r_value": math.nan, "p_value": math.nan}
    if len(finite) >= 2 and np.ptp(finite["layer"]) > 0:
        fit = stats.linregress(finite["layer"].to_numpy(float), finite["pearson_r"].to_numpy(float))
        trend = {
            "slope": float(fit.slope),
            "intercept": float(fit.intercept),
            "r_value": float(fit.rvalue),
            "p_value": float(fit.pvalue),
        }
    return per_layer, trend
