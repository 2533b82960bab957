"""headstab.evaluation: next-token loss, perplexity, held-out windows and head ablations."""

import math

import numpy as np
import pytest
import torch
from helpers.bridges import tiny_bridge
from helpers.tolerances import reduction_rtol

from headstab.evaluation import (
    check_heldout_vocabulary,
    head_ablation_perplexities,
    heldout_windows,
    next_token_nll,
    perplexity,
    perplexity_from_loss,
    zero_head_hook,
)

D_HEAD = 8
# Perplexity = exp(mean loss): its relative error is the loss's absolute error, float32 sums along the
# forward pass (2 layers of d_model 32 and d_mlp 64, then 50 logits) times the loss's size (ln 50).
PPL_RTOL = reduction_rtol(np.float32, 2 * (32 + 64) + 50) * math.log(50)


def _tiny_model(seed: int = 1):
    model = tiny_bridge(d_head=D_HEAD, seed=seed)
    model.eval()
    return model


@pytest.fixture
def model():
    return _tiny_model()


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(0)
    lengths = np.array([12, 7, 3, 10, 5])
    tokens = torch.randint(0, 50, (5, 14), generator=gen).numpy()
    for p, n in enumerate(lengths):
        tokens[p, n:] = 0
    return tokens, lengths


def _o_weight(model, layer):
    return model.original_model.layers[layer].attn.o.weight


def _ppl_by_hand(model, tokens, lengths):
    """exp(mean loss), each prompt run alone at its real length: log_softmax + gather."""
    losses = []
    with torch.no_grad():
        for p, n in enumerate(lengths):
            t = torch.as_tensor(tokens[p : p + 1, :n], dtype=torch.long)
            logp = torch.log_softmax(model(t, return_type="logits")[0, :-1], dim=-1)
            losses.append(-logp.gather(-1, t[0, 1:, None])[:, 0])
    return math.exp(torch.cat(losses).mean().item())


def test_perplexity_is_exp_of_mean_token_loss_without_padding(model, prompts):
    tokens, lengths = prompts
    expected = _ppl_by_hand(model, tokens, lengths)
    for batch_size in (1, 2, 16):
        assert perplexity(model, tokens, lengths, batch_size=batch_size) == pytest.approx(expected, rel=PPL_RTOL)


def test_perplexity_agrees_with_model_loss_on_unpadded_batch(model):
    tokens = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        loss = model(tokens, return_type="loss").item()
    assert perplexity(model, tokens, np.full(3, 9)) == pytest.approx(math.exp(loss), rel=PPL_RTOL)


def test_padding_values_do_not_matter(model, prompts):
    tokens, lengths = prompts
    garbage = tokens.copy()
    for p, n in enumerate(lengths):
        garbage[p, n:] = 49
    assert perplexity(model, garbage, lengths) == pytest.approx(perplexity(model, tokens, lengths), rel=PPL_RTOL)


def test_next_token_nll_is_minus_the_log_probability_of_the_next_token():
    generator = torch.Generator().manual_seed(0)
    # logits far from 0 as well: logsumexp must not overflow where exp would
    logits = torch.randn(2, 5, 300, generator=generator) * torch.tensor([1.0, 80.0])[:, None, None]
    tokens = torch.randint(0, 300, (2, 5), generator=generator)
    by_hand = np.array(
        [
            [
                -np.log(np.exp(row - row.max()) / np.exp(row - row.max()).sum())[tokens[b, t + 1]]
                for t, row in enumerate(x)
            ]
            for b, x in enumerate(logits[:, :-1].double().numpy())
        ]
    )
    nll = next_token_nll(logits, tokens)
    assert nll.shape == (2, 4) and nll.dtype == torch.float32
    # float32 logsumexp over 300 logits of size up to ~80 x 4
    np.testing.assert_allclose(nll.numpy(), by_hand, rtol=0, atol=reduction_rtol(np.float32, 300) * 80 * 4)


def test_too_short_prompt_is_rejected(model):
    with pytest.raises(ValueError, match="prompt 1 has length 1"):
        perplexity(model, np.zeros((2, 4), dtype=int), np.array([4, 1]))


def test_ablating_head_with_zero_output_weights_changes_nothing(model, prompts):
    tokens, lengths = prompts
    with torch.no_grad():
        _o_weight(model, 1)[:, 2 * D_HEAD : 3 * D_HEAD] = 0.0
    baseline = perplexity(model, tokens, lengths)
    ablated = perplexity(model, tokens, lengths, [("blocks.1.attn.hook_z", zero_head_hook(2))])
    assert ablated == pytest.approx(baseline, rel=PPL_RTOL)
    # a head with live output weights does change the loss
    other = perplexity(model, tokens, lengths, [("blocks.1.attn.hook_z", zero_head_hook(0))])
    assert abs(other - baseline) > 100 * PPL_RTOL * baseline


def test_ablation_acts_only_through_that_head(prompts):
    tokens, lengths = prompts
    for layer, head in [(0, 1), (1, 3)]:
        model = _tiny_model()
        hooked = perplexity(model, tokens, lengths, [(f"blocks.{layer}.attn.hook_z", zero_head_hook(head))])
        with torch.no_grad():
            _o_weight(model, layer)[:, head * D_HEAD : (head + 1) * D_HEAD] = 0.0
        by_weights = perplexity(model, tokens, lengths)
        assert hooked == pytest.approx(by_weights, rel=PPL_RTOL)


def test_head_ablation_grid(model, prompts):
    tokens, lengths = prompts
    grid = head_ablation_perplexities(model, tokens, lengths, progress=False)
    assert grid.shape == (2, 4)
    single = perplexity(model, tokens, lengths, [("blocks.0.attn.hook_z", zero_head_hook(3))])
    assert grid[0, 3] == pytest.approx(single, rel=PPL_RTOL)
    baseline = perplexity(model, tokens, lengths)
    assert np.all(np.abs(grid - baseline) > 0)  # the hooks are removed again after each run


def test_a_diverged_loss_fails_with_the_value_not_a_math_range_error():
    assert perplexity_from_loss(2 * math.log(3.0), 2) == pytest.approx(3.0, rel=reduction_rtol(np.float64, 2))
    for total in (7.7e13 * 5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="diverged"):
            perplexity_from_loss(total, 5)


def test_heldout_windows_take_the_first_tokens_across_shards_in_whole_windows():
    shards = [np.arange(5), np.arange(100, 107)]
    windows = heldout_windows(shards, n_tokens=10, seq_len=4)
    assert windows.dtype == np.int64
    np.testing.assert_array_equal(windows, [[0, 1, 2, 3], [4, 100, 101, 102]])  # the tail 103, 104 is dropped


def test_heldout_windows_with_too_little_text(caplog):
    windows = heldout_windows([np.arange(9)], n_tokens=100, seq_len=4)
    assert windows.shape == (2, 4) and "fewer than analysis.heldout_tokens=100" in caplog.text
    with pytest.raises(ValueError, match="less than one window of seq_len=16; raise analysis.heldout_tokens or"):
        heldout_windows([np.arange(9)], n_tokens=100, seq_len=16)


def test_heldout_windows_name_the_budgets_own_key(caplog):
    """The neuron statistics' budget is neurons.tokens: a short text names that key, not the perplexity's."""
    heldout_windows([np.arange(9)], n_tokens=100, seq_len=4, budget_key="neurons.tokens")
    assert "fewer than neurons.tokens=100" in caplog.text and "analysis.heldout_tokens" not in caplog.text
    with pytest.raises(ValueError, match="less than one window of seq_len=16; raise neurons.tokens or"):
        heldout_windows([np.arange(9)], n_tokens=100, seq_len=16, budget_key="neurons.tokens")


def test_heldout_tokens_outside_the_vocabulary_name_the_shards():
    check_heldout_vocabulary(np.array([[0, 49]]), 50, ["a.npy"])
    with pytest.raises(
        ValueError, match=r"token id 50 is outside the model's vocabulary \(50\); the held-out shards \['a.npy'\]"
    ):
        check_heldout_vocabulary(np.array([[0, 50]]), 50, ["a.npy"])
