"""The training loss without the logits tensor: cross entropy of h @ W_U as logsumexp over vocabulary chunks minus
the target's logit.

The forward pass keeps h, W_U, the targets and each row's logsumexp; the backward pass recomputes each chunk's
logits (one more unembedding GEMM) to form (softmax - one-hot) x grad for it. At most one [seed, row, chunk]
float32 block of logits exists at a time, never [seed, row, vocab] (at d_vocab 48,262 those are most of a step's
memory traffic). Columns at or past `n_real` (a padded vocabulary) are -inf: no probability, no gradient.
"""

from __future__ import annotations

from typing import Any

import torch

VOCAB_CHUNK = 8192  # vocabulary columns of the loss at a time: [seed, rows, 8192] float32 logits


class ChunkedCrossEntropy(torch.autograd.Function):
    """Per-row cross entropy of logits h @ W_U over the first `n_real` columns, the vocabulary in chunks."""

    @staticmethod
    def forward(
        ctx: Any, h: torch.Tensor, W_U: torch.Tensor, targets: torch.Tensor, n_real: int, chunk: int
    ) -> torch.Tensor:
        """h [seed, row, d_model], W_U [seed, d_model, vocab >= n_real], targets [seed, row] -> loss [seed, row] fp32."""
        lse_parts, target_logit = [], torch.zeros(targets.shape, dtype=torch.float32, device=h.device)
        for start in range(0, n_real, chunk):
            logits = _chunk_logits(h, W_U, n_real, start, chunk)
            lse_parts.append(logits.logsumexp(dim=-1))
            inside = (targets >= start) & (targets < start + logits.shape[-1])
            local = (targets - start).clamp(0, logits.shape[-1] - 1)[..., None]
            target_logit += torch.where(inside, logits.gather(-1, local)[..., 0], 0.0)
        lse = torch.stack(lse_parts, dim=-1).logsumexp(dim=-1)
        ctx.save_for_backward(h, W_U, targets, lse)
        ctx.n_real, ctx.chunk = n_real, chunk
        return lse - target_logit

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """d loss / d logits = (softmax - one-hot) x grad, chunk by chunk, in the inputs' dtype as autocast's matmuls."""
        h, W_U, targets, lse = ctx.saved_tensors
        grad_h = torch.zeros(h.shape, dtype=torch.float32, device=h.device)  # summed over chunks in float32
        grad_W_U = torch.zeros_like(W_U)  # padded columns: no gradient
        for start in range(0, ctx.n_real, ctx.chunk):
            logits = _chunk_logits(h, W_U, ctx.n_real, start, ctx.chunk)
            stop = start + logits.shape[-1]
            grad = (logits - lse[..., None]).exp_()
            inside = (targets >= start) & (targets < stop)
            local = (targets - start).clamp(0, stop - start - 1)[..., None]
            grad.scatter_add_(-1, local, -inside.float()[..., None])
            grad = (grad * grad_loss[..., None]).to(h.dtype)
            grad_h += torch.bmm(grad, W_U[:, :, start:stop].transpose(1, 2)).float()
            grad_W_U[:, :, start:stop] = torch.bmm(h.transpose(1, 2), grad)
        return grad_h.to(h.dtype), grad_W_U, None, None, None


def _chunk_logits(h: torch.Tensor, W_U: torch.Tensor, n_real: int, start: int, chunk: int) -> torch.Tensor:
    """Float32 logits of columns start ... start + chunk (within W_U), [seed, row, columns]; those >= n_real are -inf."""
    stop = min(start + chunk, W_U.shape[-1])
    with torch.autocast(h.device.type, enabled=False):  # the inputs already have the matmul's dtype
        logits = torch.bmm(h, W_U[:, :, start:stop]).float()
    if stop > n_real:
        logits[..., n_real - start :] = float("-inf")
    return logits


def chunked_cross_entropy(
    h: torch.Tensor, W_U: torch.Tensor, targets: torch.Tensor, n_real: int, chunk: int = VOCAB_CHUNK
) -> torch.Tensor:
    """-log softmax(h @ W_U[:, :, :n_real])[target] of every row, [seed, row] float32, as logsumexp over vocabulary
    chunks minus the target's logit; no [seed, row, vocab] tensor is kept for the backward pass.

    h [seed, row, d_model] and W_U [seed, d_model, vocab] in the matmul dtype; targets [seed, row] int64 < n_real.
    """
    return ChunkedCrossEntropy.apply(h, W_U, targets, n_real, chunk)
