"""headstab.layer_surgery: layer drop and swap from one intact pass (issue 14 part 3)."""

import math

import numpy as np
import pytest
import torch
from helpers.bridges import tiny_bridge
from helpers.tolerances import reduction_rtol

from headstab.layer_surgery import block_order, conditions, drop_swap_counts

N_LAYERS = 3
# Summed loss over 3 x 15 predictions: float32 sums along the forward pass (3 layers of d_model 32 and d_mlp
# 64, then 50 logits) and over the predictions, times the loss's size (ln 50 per prediction).
LOSS_RTOL = reduction_rtol(np.float32, N_LAYERS * (32 + 64) + 50 + 45) * math.log(50)


def _model(attn_only=False):
    model = tiny_bridge(n_layers=N_LAYERS, seed=3, attn_only=attn_only)
    model.eval()
    return model


def _windows():
    return torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(0)).numpy()


def test_every_layer_is_dropped_and_every_adjacent_pair_swapped():
    assert conditions(3) == [("drop", 0), ("drop", 1), ("drop", 2), ("swap", 0), ("swap", 1)]
    assert block_order("drop", 0, 3) == [1, 2]
    assert block_order("drop", 2, 3) == []
    assert block_order("swap", 0, 3) == [1, 0, 2]
    assert block_order("swap", 1, 3) == [2, 1]


def test_the_conditions_cost_l_times_l_minus_1_block_passes_beside_the_intact_pass():
    model, calls = _model(), []
    for block in model.blocks:
        block.register_forward_hook(lambda module, args, output: calls.append(module))
    drop_swap_counts(model, _windows(), batch_size=3)  # one batch
    assert len(calls) == N_LAYERS + N_LAYERS * (N_LAYERS - 1)  # what benchmarks/bench_drop_swap.flop_ratio counts


def test_a_swap_past_the_last_layer_is_refused():
    with pytest.raises(ValueError, match=r"swap 0\.\.1"):
        block_order("swap", 2, 3)


@pytest.mark.parametrize("attn_only", [False, True])
def test_dropping_a_layer_of_zero_weights_changes_nothing(attn_only):
    model = _model(attn_only)
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            if name.startswith("blocks.1."):
                tensor.zero_()
    counts = drop_swap_counts(model, _windows(), batch_size=2)
    index = counts["conditions"].index(("drop", 1))
    assert counts["agree"][index] == counts["n_predictions"] == 3 * 15
    assert counts["loss"][index] == pytest.approx(counts["intact_loss"], rel=LOSS_RTOL)
    # a live layer does change the predictions
    live = counts["loss"][counts["conditions"].index(("drop", 0))]
    assert abs(live - counts["intact_loss"]) > 10 * LOSS_RTOL * counts["intact_loss"]


def test_swapping_two_identical_layers_changes_nothing():
    model = _model()
    with torch.no_grad():
        state = model.state_dict(keep_vars=True)
        for name, tensor in state.items():
            if name.startswith("blocks.2."):
                tensor.copy_(state[name.replace("blocks.2.", "blocks.1.", 1)])
    counts = drop_swap_counts(model, _windows(), batch_size=3)
    index = counts["conditions"].index(("swap", 1))
    assert counts["agree"][index] == counts["n_predictions"]
    assert counts["loss"][index] == pytest.approx(counts["intact_loss"], rel=LOSS_RTOL)
    assert counts["agree"][counts["conditions"].index(("swap", 0))] < counts["n_predictions"]


def test_a_drop_from_the_cached_residual_equals_a_drop_by_hooks_in_a_full_pass():
    """The prefix is reused: skipping block l by hooks (resid_post := resid_pre) in a whole forward pass gives
    the same loss."""
    model, windows = _model(), _windows()
    counts = drop_swap_counts(model, windows, batch_size=2)
    tokens = torch.as_tensor(windows)
    for layer in range(N_LAYERS):
        stash = {}

        def keep(resid, hook):
            stash["pre"] = resid

        def skip(resid, hook):
            return stash["pre"]

        hooks = [(f"blocks.{layer}.hook_resid_pre", keep), (f"blocks.{layer}.hook_resid_post", skip)]
        with torch.no_grad():
            logits = model.run_with_hooks(tokens, fwd_hooks=hooks, return_type="logits")
        log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        expected = float(-log_probs.gather(-1, tokens[:, 1:, None]).sum())
        assert counts["loss"][layer] == pytest.approx(expected, rel=LOSS_RTOL)


def test_windows_must_have_two_tokens():
    with pytest.raises(ValueError, match="seq_len >= 2"):
        drop_swap_counts(_model(), np.zeros((2, 1), dtype=int))
