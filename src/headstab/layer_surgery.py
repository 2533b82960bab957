"""Layer drop and swap at inference (docs/beyond_the_paper.md): one intact pass, then every condition from it.

Conditions of a model with L layers: drop layer l (its residual update is skipped: block l's output is its
input), l in 0..L-1; swap layers l and l+1 (block l+1 runs before block l), l in 0..L-2. The model is never
copied: the intact pass (`run_with_cache`) keeps every layer's `hook_resid_pre`, and a condition starting at
layer l runs the bridge's own blocks, in the condition's order, from `blocks.{l}.hook_resid_pre`, then
`ln_final` and `unembed`. So the layers before l are not recomputed, and drop l and swap l share their first
block (l + 1 on resid_pre l): the 2L - 1 conditions cost L(L - 1) block passes plus 2L - 1 unembeddings.

Measured per condition over the held-out windows: the summed next-token loss (ΔPPL against the intact
model) and how many predictions keep the intact model's top-1 token.
torch and transformer_lens are imported lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from headstab.evaluation import next_token_nll

__all__ = ["CONDITIONS", "conditions", "block_order", "drop_swap_counts"]

CONDITIONS = ("drop", "swap")


def conditions(n_layers: int) -> list[tuple[str, int]]:
    """(condition, layer) of every drop (layers 0..L-1) and swap (layers l, l+1 for l in 0..L-2)."""
    return [("drop", layer) for layer in range(n_layers)] + [("swap", layer) for layer in range(n_layers - 1)]


def block_order(condition: str, layer: int, n_layers: int) -> list[int]:
    """The blocks run, in order, from `blocks.{layer}.hook_resid_pre` on under a condition."""
    if condition == "drop" and 0 <= layer < n_layers:
        return list(range(layer + 1, n_layers))
    if condition == "swap" and 0 <= layer < n_layers - 1:
        return [layer + 1, layer, *range(layer + 2, n_layers)]
    raise ValueError(
        f"condition ({condition!r}, layer {layer}) does not exist in a {n_layers}-layer model; "
        f"drop takes layers 0..{n_layers - 1}, swap 0..{n_layers - 2}"
    )


def _run_blocks(model: Any, resid: Any, order: Sequence[int]) -> Any:
    """The residual stream after the blocks `order` applied to `resid`."""
    for index in order:
        resid = model.blocks[index](resid)
        resid = resid[0] if isinstance(resid, tuple) else resid  # a BlockBridge returns (resid, ...)
    return resid


def drop_swap_counts(model: Any, windows: np.ndarray, batch_size: int = 16) -> dict[str, Any]:
    """Intact and per-condition next-token loss sums and top-1 agreements over held-out windows.

    windows: int [window, seq_len] token ids, every position real (`headstab.evaluation.heldout_windows`);
    position t predicts token t + 1, so each window gives seq_len - 1 predictions.
    Returns {"n_predictions": int, "intact_loss": float (nats, summed), "conditions": [(condition, layer)],
    "loss": float64 [condition] (summed nats), "agree": int64 [condition] (predictions whose argmax equals the
    intact model's)}.
    """
    import torch

    windows = np.asarray(windows)
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be [window, seq_len >= 2]; got shape {windows.shape}")
    model.eval()
    n_layers = model.cfg.n_layers
    plan = conditions(n_layers)
    device = next(model.parameters()).device
    loss = np.zeros(len(plan))
    agree = np.zeros(len(plan), dtype=np.int64)
    intact_loss, n_predictions = 0.0, 0
    names = {f"blocks.{layer}.hook_resid_pre" for layer in range(n_layers)}
    runs_by_layer: dict[int, list[tuple[int, list[int]]]] = {}
    for index, (condition, layer) in enumerate(plan):
        runs_by_layer.setdefault(layer, []).append((index, block_order(condition, layer, n_layers)))

    def scores(logits: Any, tokens: Any, reference: Any | None) -> tuple[float, int, Any]:
        nll = next_token_nll(logits, tokens).sum()
        top1 = logits[:, :-1].argmax(dim=-1)
        agreeing = 0 if reference is None else int((top1 == reference).sum())
        return float(nll), agreeing, top1

    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            batch = torch.as_tensor(windows[start : start + batch_size], dtype=torch.long, device=device)
            logits, cache = model.run_with_cache(batch, names_filter=lambda name: name in names)
            nll, _, reference = scores(logits, batch, None)
            intact_loss += nll
            n_predictions += batch[:, 1:].numel()
            for layer, runs in runs_by_layer.items():
                # drop l and swap l both start with block l + 1 on resid_pre l (the last layer's drop with none).
                first = runs[0][1][:1]
                shared = _run_blocks(model, cache[f"blocks.{layer}.hook_resid_pre"], first)
                for index, order in runs:
                    logits = model.unembed(model.ln_final(_run_blocks(model, shared, order[len(first) :])))
                    nll, agreeing, _ = scores(logits, batch, reference)
                    loss[index] += nll
                    agree[index] += agreeing
    return {
        "n_predictions": n_predictions,
        "intact_loss": intact_loss,
        "conditions": plan,
        "loss": loss,
        "agree": agree,
    }
