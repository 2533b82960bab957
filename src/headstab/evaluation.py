"""Evaluating a trained refit: next-token loss, perplexity and head ablations (paper §4.5, §4.8).

The validation perplexity of §4.5 (§B.7 figures) runs every refit over held-out text cut into windows
(`heldout_windows`); the ablations of §4.8 rerun the anchor refit on the prompts with one head's
`blocks.{layer}.attn.hook_z` zeroed at a time. torch is imported lazily: `heldout_windows` and
`perplexity_from_loss` need none.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

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
        raise ValueError(f"lengths must be [prompt] = ({tokens_t.shape[0]},), got {tuple(lengths_t.shape)}")
    if (lengths_t < 2).any() or (lengths_t > tokens_t.shape[1]).any():
        bad = int(torch.nonzero((lengths_t < 2) | (lengths_t > tokens_t.shape[1]))[0, 0])
        raise ValueError(
            f"prompt {bad} has length {int(lengths_t[bad])}; every prompt needs 2..{tokens_t.shape[1]} "
            "tokens to have at least one next-token prediction"
        )
    return tokens_t, lengths_t


def next_token_nll(logits: Any, tokens: Any) -> Any:
    """float32 [batch, pos - 1]: the cross-entropy (nats) of position t's logits for token t + 1.

    logsumexp minus the target's logit: the same number as -log_softmax at the target, and faster than
    log_softmax then gather (benchmarks/README.md, "Layer drop and swap").
    """
    import torch

    logits = logits[:, :-1].float()
    return torch.logsumexp(logits, dim=-1) - logits.gather(-1, tokens[:, 1:, None])[..., 0]


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
    import torch

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
            nll = next_token_nll(logits, batch)  # [batch, pos-1]
            real = torch.arange(width - 1, device=device)[None, :] < (batch_len.to(device)[:, None] - 1)
            total += float(nll[real].sum())
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


def heldout_windows(
    shards: Sequence[np.ndarray], n_tokens: int, seq_len: int, budget_key: str = "analysis.heldout_tokens"
) -> np.ndarray:
    """The first `n_tokens` tokens of the concatenated shards as whole windows, [window, seq_len] int64.

    A tail shorter than seq_len is dropped; every refit of an architecture sees the same windows. budget_key: the
    config key of `n_tokens`, named when the text is short.
    """
    stream, remaining = [], n_tokens
    for shard in shards:
        if remaining <= 0:
            break
        stream.append(np.asarray(shard[:remaining], dtype=np.int64))
        remaining -= len(stream[-1])
    stream = np.concatenate(stream) if stream else np.zeros(0, np.int64)
    if len(stream) < n_tokens:
        log.warning("held-out text has %d tokens, fewer than %s=%d; using all of it", len(stream), budget_key, n_tokens)
    n_windows = len(stream) // seq_len
    if n_windows == 0:
        raise ValueError(
            f"held-out text has {len(stream)} tokens, less than one window of seq_len={seq_len}; "
            f"raise {budget_key} or use a larger held-out corpus"
        )
    return stream[: n_windows * seq_len].reshape(n_windows, seq_len)


def check_heldout_vocabulary(windows: np.ndarray, d_vocab: int, source: object) -> None:
    """Fail naming `source` when a held-out token id is outside the model's vocabulary."""
    if windows.max() >= d_vocab:
        raise ValueError(
            f"held-out token id {windows.max()} is outside the model's vocabulary ({d_vocab}); "
            f"the held-out shards {source} use another tokenizer"
        )
