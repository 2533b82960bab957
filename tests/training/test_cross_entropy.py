"""The chunked cross entropy against log_softmax + gather of the whole logits: its values, its gradients, the padded
columns it leaves out, and the same train_log.csv as the plain loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.training import train_refit
from headstab.training.cross_entropy import chunked_cross_entropy
from headstab.training.model import StackedTransformer

from .conftest import final_state, quiet, read_log, write_shards

BF16_UNIT_ROUNDOFF = 2.0**-8  # bfloat16 keeps 8 significant bits
N_SEEDS, ROWS, D_MODEL, N_REAL, PADDED = 2, 30, 16, 300, 384


def inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """h [seed, row, d_model], W_U [seed, d_model, 384] (columns 300 on: padding, large, so that reading them shows),
    targets [seed, row] below 300, every real column a target somewhere."""
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(N_SEEDS, ROWS, D_MODEL, generator=generator)
    W_U = torch.randn(N_SEEDS, D_MODEL, PADDED, generator=generator)
    W_U[:, :, N_REAL:] = 50.0
    targets = torch.randint(0, N_REAL, (N_SEEDS, ROWS), generator=generator)
    targets[0, 0], targets[1, -1] = 0, N_REAL - 1  # the first and the last real column
    return h.to(dtype).requires_grad_(), W_U.to(dtype).requires_grad_(), targets


def plain_cross_entropy(h: torch.Tensor, W_U: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss it replaces: the whole [seed, row, vocab] logits, float32 log_softmax, gather."""
    log_probs = torch.bmm(h, W_U[:, :, :N_REAL]).float().log_softmax(dim=-1)
    return -log_probs.gather(-1, targets[..., None])[..., 0]


@pytest.mark.parametrize("chunk", [7, 128, 8192], ids=["chunk7", "chunk128", "one-chunk"])
def test_chunked_cross_entropy_equals_log_softmax_and_its_gradients(chunk):
    h, W_U, targets = inputs()
    found = chunked_cross_entropy(h, W_U, targets, N_REAL, chunk)
    found.sum().backward()
    found_grads = h.grad.clone(), W_U.grad.clone()
    h.grad = W_U.grad = None
    expected = plain_cross_entropy(h, W_U, targets)
    expected.sum().backward()
    assert found.shape == (N_SEEDS, ROWS) and found.dtype == torch.float32
    # A logit sums d_model products; the log-sum-exp sums N_REAL exponentials; both scaled by the largest logit.
    logit_scale = float(torch.bmm(h, W_U[:, :, :N_REAL]).detach().abs().max())
    atol = reduction_atol(np.float32, D_MODEL + N_REAL, logit_scale)
    torch.testing.assert_close(found, expected.detach(), rtol=0, atol=atol)
    # d h sums N_REAL columns of W_U weighted by probabilities; d W_U sums the rows of h.
    atol_h = reduction_atol(np.float32, D_MODEL + N_REAL, float(W_U[:, :, :N_REAL].detach().abs().max()))
    torch.testing.assert_close(found_grads[0], h.grad, rtol=0, atol=atol_h)
    atol_w = reduction_atol(np.float32, D_MODEL + N_REAL + ROWS, float(h.detach().abs().max()))
    torch.testing.assert_close(found_grads[1][:, :, :N_REAL], W_U.grad[:, :, :N_REAL], rtol=0, atol=atol_w)
    assert torch.count_nonzero(found_grads[1][:, :, N_REAL:]) == 0  # the padding gets no gradient


def test_padded_columns_are_left_out_of_the_loss():
    h, W_U, targets = (t.detach() for t in inputs())
    with torch.no_grad():
        padded = chunked_cross_entropy(h, W_U, targets, N_REAL, 128)
        unpadded = chunked_cross_entropy(h, W_U[:, :, :N_REAL].contiguous(), targets, N_REAL, 128)
        read = chunked_cross_entropy(h, W_U, targets, PADDED, 128)  # the wrong version: the padding in the softmax
    logit_scale = float(torch.bmm(h, W_U[:, :, :N_REAL]).abs().max())
    atol = reduction_atol(np.float32, D_MODEL + N_REAL, logit_scale)  # the last chunk's GEMM of another width
    torch.testing.assert_close(padded, unpadded, rtol=0, atol=atol)
    # read, the padding's logits (50 x the sum of a row of h) only add probability, most of it in many rows
    assert (read - padded).min() > -atol and (read - padded).max() > 50.0


def test_bfloat16_inputs_give_the_plain_bfloat16_loss():
    """Both round each logit to bfloat16 (the matmul's output) and reduce in float32; the chunks' GEMMs may round a
    logit one bfloat16 unit apart from the whole GEMM's."""
    h, W_U, targets = inputs(torch.bfloat16)
    with torch.no_grad():
        found = chunked_cross_entropy(h, W_U, targets, N_REAL, 128)
        expected = plain_cross_entropy(h, W_U, targets)
    logit_scale = float(torch.bmm(h, W_U[:, :, :N_REAL]).detach().float().abs().max())
    atol = 2 * BF16_UNIT_ROUNDOFF * logit_scale + reduction_atol(np.float32, N_REAL, logit_scale)
    torch.testing.assert_close(found, expected, rtol=0, atol=atol)


def plain_loss(model: StackedTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """StackedTransformer.loss as it was: log_softmax of the whole logits, gather, the mean per seed."""
    predicted = model(tokens).float().log_softmax(dim=-1)[:, :, :-1].gather(-1, tokens[:, :, 1:, None])[..., 0]
    return -predicted.sum(dim=-1).sum(dim=-1) / predicted[0].numel()


def log_losses(out_dir) -> np.ndarray:
    return np.array([float(row["loss"]) for row in read_log(out_dir / "train_log.csv")])


def test_training_logs_the_losses_of_the_plain_loss(tiny_spec, tmp_path, monkeypatch):
    """Ten steps, a log row each: the chunked loss (vocabulary chunks of 7) writes the train_log.csv of log_softmax +
    gather, to the CSV's 6 decimals plus the rounding of a mean over the batch of log-sum-exps over the vocabulary."""
    windows = np.random.default_rng(3).integers(0, 32, size=(64, 16))
    shards = write_shards(tmp_path, [windows.ravel()])
    spec = tiny_spec(n_tokens=10 * 4 * 16, log_every=1, checkpoint_every=10)
    monkeypatch.setattr(chunked_cross_entropy, "__defaults__", (7,))  # 5 chunks of the 32 tokens, the last padded
    train_refit(spec, 1, shards, tmp_path / "chunked", quiet())
    monkeypatch.setattr(StackedTransformer, "loss", plain_loss)
    train_refit(spec, 1, shards, tmp_path / "plain", quiet())
    chunked, plain = log_losses(tmp_path / "chunked"), log_losses(tmp_path / "plain")
    assert len(chunked) == 10
    atol = 1e-6 + reduction_atol(np.float32, spec.d_vocab + 4 * 15, float(plain.max()))
    np.testing.assert_allclose(chunked, plain, rtol=0, atol=atol)
    a, b = final_state(tmp_path / "chunked"), final_state(tmp_path / "plain")
    assert {k: t.shape for k, t in a.items()} == {k: t.shape for k, t in b.items()}
