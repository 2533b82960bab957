"""The training model on the device `make gpu-check` names (HEADSTAB_GPU_CHECK_DEVICE; CUDA when present, else the
CPU): the stack equals single refits, the chunked loss equals log_softmax + gather, sdpa equals materialised
attention, fused Adam steps as the unfused one. The CUDA-only checks (inductor, synchronising calls) skip elsewhere.
Marked `gpu`: `pytest -m gpu` selects them; on the CPU they run at toy sizes in make test too."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.training.cross_entropy import chunked_cross_entropy
from headstab.training.model import StackedTransformer

from .test_cross_entropy import N_REAL, inputs, plain_cross_entropy
from .test_model import demo_spec, forward_backward, gradient_terms, loss_terms, path_terms, random_tokens

pytestmark = pytest.mark.gpu
DEVICE = torch.device(os.environ.get("HEADSTAB_GPU_CHECK_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
cuda_only = pytest.mark.skipif(DEVICE.type != "cuda", reason="CUDA only: unmeasured on this device")


def test_the_stack_computes_each_refit_as_a_job_of_one(tiny_spec):
    """fp32: bit for bit on the CPU; on CUDA the batched GEMMs may take other kernels per k, so within the rounding of
    the loss's and gradients' reductions."""
    spec = demo_spec(tiny_spec, n_layers=2)
    seeds = [1, 2, 3]
    tokens = random_tokens(spec, len(seeds), 2, 64).to(DEVICE)
    stack = StackedTransformer.from_seeds(spec, seeds, device=DEVICE)
    logits, loss, gradients = forward_backward(stack, tokens)
    for i, seed in enumerate(seeds):
        single = StackedTransformer.from_seeds(spec, [seed], device=DEVICE)
        expected = forward_backward(single, tokens[i : i + 1])
        if DEVICE.type == "cpu":
            assert torch.equal(loss[i], expected[1][0]) and torch.equal(logits[i], expected[0][0])
            assert all(torch.equal(g[i], h[0]) for g, h in zip(gradients, expected[2], strict=True))
        scale = expected[0].abs().max().item()
        atol = reduction_atol(np.float32, loss_terms(spec, 2, 64), scale)
        torch.testing.assert_close(loss[i], expected[1][0], rtol=0, atol=atol)
        for gradient, reference in zip(gradients, expected[2], strict=True):
            atol = reduction_atol(np.float32, gradient_terms(spec, 2, 64), reference.abs().max().item())
            torch.testing.assert_close(gradient[i], reference[0], rtol=0, atol=atol)


def test_the_chunked_loss_equals_log_softmax_on_the_device():
    h, W_U, targets = (t.detach().to(DEVICE) for t in inputs())
    with torch.no_grad():
        found, expected = chunked_cross_entropy(h, W_U, targets, N_REAL, 128), plain_cross_entropy(h, W_U, targets)
    logit_scale = float(torch.bmm(h, W_U[:, :, :N_REAL]).abs().max())
    atol = reduction_atol(np.float32, h.shape[-1] + N_REAL, logit_scale)
    torch.testing.assert_close(found, expected, rtol=0, atol=atol)


def test_sdpa_logits_equal_materialised_ones(tiny_spec):
    spec = demo_spec(tiny_spec, n_layers=2)
    tokens = random_tokens(spec, 2, 2, 64).to(DEVICE)
    with torch.no_grad():
        expected = StackedTransformer.from_seeds(spec, [1, 2], device=DEVICE)(tokens)
        found = StackedTransformer.from_seeds(spec, [1, 2], device=DEVICE, attention="sdpa")(tokens)
    atol = reduction_atol(np.float32, path_terms(spec, 64), expected.abs().max().item())
    torch.testing.assert_close(found, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_fused_adam_steps_as_the_unfused_one(tiny_spec, optimizer):
    """One step from the same gradients: every weight tensor moves, to where the unfused kernel moves it within the
    rounding of the update's few operations (eps x lr each) and of the weight itself."""
    spec, lr = tiny_spec(), 1e-2
    tokens = random_tokens(spec, 2, 2, 16).to(DEVICE)
    models = [StackedTransformer.from_seeds(spec, [1, 2], device=DEVICE) for _ in range(2)]
    start = [p.detach().clone() for p in models[0].parameters()]
    for model, fused in zip(models, (True, False), strict=True):
        try:
            adam = optimizer(model.parameters(), lr=lr, fused=fused)
        except RuntimeError as err:  # a torch build without the fused kernel for this device
            pytest.skip(f"no fused {optimizer.__name__} on {DEVICE}: {err}")
        model.backward(model.loss(tokens))
        adam.step()
    eps = float(np.finfo(np.float32).eps)
    for before, fused, unfused in zip(start, models[0].parameters(), models[1].parameters(), strict=True):
        assert not torch.equal(fused, before)
        torch.testing.assert_close(fused, unfused, rtol=4 * eps, atol=reduction_atol(np.float32, 8, lr))


@cuda_only
def test_the_inductor_compiled_loss_equals_eager(tiny_spec):
    spec = demo_spec(tiny_spec, n_layers=2)
    tokens = random_tokens(spec, 2, 2, 64).to(DEVICE)
    model = StackedTransformer.from_seeds(spec, [1, 2], device=DEVICE)
    with torch.no_grad(), model.matmul_precision():
        eager, compiled = model.loss(tokens), torch.compile(model.loss)(tokens)
    atol = reduction_atol(np.float32, loss_terms(spec, 2, 64), float(eager.abs().max()))
    torch.testing.assert_close(compiled, eager, rtol=0, atol=atol)


@cuda_only
def test_a_training_step_makes_no_synchronising_call(tiny_spec):
    spec = demo_spec(tiny_spec, n_layers=2)
    tokens = random_tokens(spec, 2, 2, 64).to(DEVICE)
    model = StackedTransformer.from_seeds(spec, [1, 2], device=DEVICE)
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    for step in range(3):  # the first step allocates the optimiser state
        if step == 2:
            torch.cuda.set_sync_debug_mode("error")
        try:
            adam.zero_grad(set_to_none=True)
            model.backward(model.loss(tokens))
            adam.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
