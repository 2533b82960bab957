"""The plain training model: TransformerBridge's initial weights and state-dict names, its logits and gradients,
and a stack of k refits computing exactly what k single refits compute."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.fileio import save_torch_atomic
from headstab.plan.config import REPO_ROOT, architecture_spec, load_yaml
from headstab.plan.spec import ArchitectureSpec, ConfigError
from headstab.refits.models import build_model, load_trained_model
from headstab.training.initial_weights import INIT_MODES, initial_state_dict
from headstab.training.model import StackedTransformer

# The spec options the model covers, each on the tiny spec (2 layers, d_model 16, 2 heads of 8, vocab 32).
OPTIONS = [
    {},
    {"attn_only": True},
    {"n_layers": 4, "n_heads": 4},  # n_heads * d_head = 32 != d_model 16, as the paper's h16 architectures
    {"act_fn": "gelu_new"},
    {"act_fn": "relu"},
    {"act_fn": "silu"},
    {"normalization_type": "LNPre"},
    {"normalization_type": "RMS"},
    {"normalization_type": "RMSPre"},
    {"positional_embedding_type": "rotary"},
]
BF16_UNIT_ROUNDOFF = 2.0**-8  # bfloat16 keeps 8 significant bits


def option_id(option: dict) -> str:
    return "-".join(f"{key}={value}" for key, value in option.items()) or "default"


def path_terms(spec: ArchitectureSpec, pos: int) -> int:
    """Terms summed along one path from the embedding to a logit: per block the norm, q.k over d_head, the softmax
    and pattern.v over positions, the four projections (and the MLP's norm and two); then the final norm and unembed.

    Rounding a sum of n float32 terms errs by at most n eps times their size (tests/helpers/tolerances.py); two float32
    computations of the same function in another order differ by at most that summed along the path.
    """
    attention = 2 * spec.d_model + spec.d_head + 2 * pos + spec.n_heads * spec.d_head
    mlp = 0 if spec.attn_only else 2 * spec.d_model + spec.d_mlp
    return spec.n_layers * (attention + mlp) + 2 * spec.d_model


def loss_terms(spec: ArchitectureSpec, batch: int, pos: int) -> int:
    """The path to a logit, the log-sum-exp over d_vocab, and the mean over batch * (pos - 1) positions."""
    return path_terms(spec, pos) + spec.d_vocab + batch * (pos - 1)


def gradient_terms(spec: ArchitectureSpec, batch: int, pos: int) -> int:
    """The loss, back along the path, and each weight's gradient summed over the batch * pos rows."""
    return loss_terms(spec, batch, pos) + path_terms(spec, pos) + batch * pos


def perturbed_state(spec: ArchitectureSpec, seed: int) -> dict[str, torch.Tensor]:
    """The initial weights plus N(0, 0.05^2) on every trained tensor, so that biases and norm weights matter too."""
    generator = torch.Generator().manual_seed(seed)
    return {name: t if name == "unembed.bias" else t + 0.05 * torch.randn(t.shape, generator=generator)
            for name, t in initial_state_dict(spec, seed).items()}  # fmt: skip


def random_tokens(spec: ArchitectureSpec, n_seeds: int, batch: int, pos: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, spec.d_vocab, (n_seeds, batch, pos), generator=torch.Generator().manual_seed(seed))


def stack_gradients(stack: StackedTransformer, i: int) -> dict[str, torch.Tensor]:
    """Refit i's gradients under the bridge's state-dict names (a copy of the stack holding the gradients)."""
    holder = copy.deepcopy(stack)
    with torch.no_grad():
        for target, parameter in zip(holder.parameters(), stack.parameters(), strict=True):
            target.copy_(parameter.grad)
    return {name: t for name, t in holder.seed_state_dict(i).items() if name != "unembed.bias"}


def forward_backward(stack: StackedTransformer, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list]:
    logits = stack(tokens).detach()
    loss = stack.loss(tokens)
    stack.backward(loss)
    return logits, loss.detach(), [p.grad for p in stack.parameters()]


# ---------------------------------------------------------------- initial weights and state dicts
@pytest.mark.parametrize("option", [*OPTIONS, *({"init_mode": mode} for mode in INIT_MODES)], ids=option_id)
def test_initial_weights_are_build_models_bit_for_bit(tiny_spec, option):
    spec = tiny_spec(**option)
    stack = StackedTransformer.from_seeds(spec, [3, 4])
    for i, seed in enumerate([3, 4]):
        expected = build_model(spec, seed).state_dict()
        for found in (initial_state_dict(spec, seed), stack.seed_state_dict(i)):
            assert list(found) == list(expected)  # the same names, in the same order
            for name, tensor in expected.items():
                assert found[name].dtype == tensor.dtype and torch.equal(found[name], tensor), name


def test_tl_native_residual_scale_is_kept_without_the_legacy_fix(tiny_spec):
    spec = tiny_spec()
    expected = build_model(spec, 5, legacy_gpt2_init=False).state_dict()
    found = initial_state_dict(spec, 5, legacy_gpt2_init=False)
    assert all(torch.equal(found[name], tensor) for name, tensor in expected.items())
    assert not torch.equal(found["blocks.0.attn.o.weight"], initial_state_dict(spec, 5)["blocks.0.attn.o.weight"])


@pytest.mark.parametrize("arch", ["l8_h16", "gpt2"])
def test_paper_shapes_start_from_build_models_weights_and_logits(arch):
    spec = architecture_spec(load_yaml(REPO_ROOT / "config" / "config.yaml"), arch)
    bridge = build_model(spec, 2)
    stack = StackedTransformer.from_seeds(spec, [2])
    found = stack.seed_state_dict(0)
    assert all(torch.equal(found[name], tensor) for name, tensor in bridge.state_dict().items())
    tokens = random_tokens(spec, 1, 1, 8)
    with torch.no_grad():
        expected, logits = bridge(tokens[0]), stack(tokens)[0]
    atol = reduction_atol(np.float32, path_terms(spec, 8), expected.abs().max().item())
    torch.testing.assert_close(logits, expected, rtol=0, atol=atol)


def test_a_refits_state_dict_is_a_checkpoint_load_trained_model_reads(tiny_spec, tmp_path):
    spec = tiny_spec()
    stack = StackedTransformer(spec, 3)
    for i in range(3):
        stack.load_seed_state_dict(i, perturbed_state(spec, seed=i))
    save_torch_atomic(stack.seed_state_dict(1), tmp_path / "final.pt")
    bridge = load_trained_model(spec, tmp_path / "final.pt")
    assert all(torch.equal(bridge.state_dict()[name], t) for name, t in perturbed_state(spec, seed=1).items())
    again = StackedTransformer(spec, 1)
    again.load_seed_state_dict(0, bridge.state_dict())
    assert all(torch.equal(again.seed_state_dict(0)[name], t) for name, t in stack.seed_state_dict(1).items())


def test_exported_state_dict_is_a_copy(tiny_spec):
    stack = StackedTransformer.from_seeds(tiny_spec(), [1])
    state = stack.seed_state_dict(0)
    state["blocks.0.attn.q.bias"].add_(1.0)
    state["embed.weight"].add_(1.0)
    assert torch.count_nonzero(stack.blocks[0].attn.b_QKV) == 0
    assert torch.equal(stack.seed_state_dict(0)["embed.weight"], initial_state_dict(tiny_spec(), 1)["embed.weight"])


def test_loading_another_architectures_state_names_the_tensor(tiny_spec):
    stack = StackedTransformer(tiny_spec(), 1)
    with pytest.raises(ValueError, match=r"architecture 'tiny'.*missing \['blocks\.0\.ln2\.bias'"):
        stack.load_seed_state_dict(0, initial_state_dict(tiny_spec(attn_only=True), 1))
    with pytest.raises(
        ValueError, match=r"blocks\.0\.attn\.k\.bias has shape \(32,\), architecture 'tiny' needs \(16,\)"
    ):
        stack.load_seed_state_dict(0, initial_state_dict(tiny_spec(n_heads=4), 1))
    state = initial_state_dict(tiny_spec(), 1)
    state["unembed.bias"][0] = 1.0
    with pytest.raises(ValueError, match="non-zero unembed.bias"):
        stack.load_seed_state_dict(0, state)


UNIMPLEMENTED = [("act_fn", "solu"), ("normalization_type", "LNPost"), ("positional_embedding_type", "shortformer"),
                 ("init_mode", "muP")]  # fmt: skip


@pytest.mark.parametrize("key, value", UNIMPLEMENTED)
def test_an_option_the_model_lacks_is_refused_naming_key_and_value(tiny_spec, key, value):
    with pytest.raises(ConfigError, match=rf"'architectures\.tiny\.{key}': '{value}' is not implemented"):
        StackedTransformer(tiny_spec(**{key: value}), 1)


def test_rotary_with_odd_d_head_and_unknown_switches_are_refused(tiny_spec):
    with pytest.raises(ConfigError, match=r"'architectures\.tiny\.d_head'.*even, not 7"):
        StackedTransformer(tiny_spec(positional_embedding_type="rotary", d_head=7), 1)
    with pytest.raises(ConfigError, match="precision 'fp16' is unknown; use one of fp32, tf32, bf16"):
        StackedTransformer(tiny_spec(), 1, precision="fp16")
    with pytest.raises(ConfigError, match="attention 'flash' is unknown; use one of materialised, sdpa"):
        StackedTransformer(tiny_spec(), 1, attention="flash")


# ---------------------------------------------------------------- the bridge's numbers
@pytest.mark.parametrize("option", OPTIONS, ids=option_id)
def test_logits_loss_and_gradients_match_the_bridges(tiny_spec, option):
    spec = tiny_spec(**option)
    state = perturbed_state(spec, seed=1)
    bridge = build_model(spec, 0)
    bridge.load_state_dict(state)
    stack = StackedTransformer(spec, 1)
    stack.load_seed_state_dict(0, state)
    batch, pos = 3, spec.n_ctx
    tokens = random_tokens(spec, 1, batch, pos)
    expected_logits, expected_loss = bridge(tokens[0]), bridge(tokens[0], return_type="loss")
    expected_loss.backward()
    logits, loss, _ = forward_backward(stack, tokens)
    terms = path_terms(spec, pos)
    scale = expected_logits.abs().max().item()
    torch.testing.assert_close(
        logits[0], expected_logits.detach(), rtol=0, atol=reduction_atol(np.float32, terms, scale)
    )
    torch.testing.assert_close(
        loss[0], expected_loss.detach(), rtol=0, atol=reduction_atol(np.float32, loss_terms(spec, batch, pos), scale)
    )
    gradients = stack_gradients(stack, 0)
    expected = {name: t.grad for name, t in bridge.state_dict(keep_vars=True).items() if t.requires_grad}
    assert gradients.keys() == expected.keys()
    largest = max(g.abs().max().item() for g in expected.values())
    atol = reduction_atol(np.float32, gradient_terms(spec, batch, pos), largest)
    for name, gradient in expected.items():
        torch.testing.assert_close(gradients[name], gradient, rtol=0, atol=atol, msg=name)


# ---------------------------------------------------------------- k seeds in one stack
def demo_spec(tiny_spec, **overrides) -> ArchitectureSpec:
    """The demo's shape: d_model 64, 8 heads of 8, d_mlp 256, n_ctx 128, vocab 1024."""
    return tiny_spec(d_model=64, n_heads=8, d_head=8, d_mlp=256, n_ctx=128, d_vocab=1024, **overrides)


def assert_stack_computes_single_refits(spec, attention: str, precision: str, batch: int, pos: int) -> None:
    """Logits, losses and gradients of a stack of 4 seeds equal those of each seed alone, bit for bit."""
    seeds = [1, 2, 3, 4]
    tokens = random_tokens(spec, 4, batch, pos)  # each seed its own batch
    stacked = forward_backward(StackedTransformer.from_seeds(spec, seeds, attention=attention, precision=precision),
                               tokens)  # fmt: skip
    for i, seed in enumerate(seeds):
        single = StackedTransformer.from_seeds(spec, [seed], attention=attention, precision=precision)
        logits, loss, gradients = forward_backward(single, tokens[i : i + 1])
        assert torch.equal(logits[0], stacked[0][i]) and torch.equal(loss[0], stacked[1][i])
        assert all(torch.equal(g[0], g_stacked[i]) for g, g_stacked in zip(gradients, stacked[2], strict=True))


@pytest.mark.parametrize("attention", ["materialised", "sdpa"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("option", [{}, {"attn_only": True}, {"positional_embedding_type": "rotary"}], ids=option_id)
def test_a_stack_of_four_computes_four_single_refits_bit_for_bit(tiny_spec, attention, precision, option):
    assert_stack_computes_single_refits(demo_spec(tiny_spec, **option), attention, precision, batch=2, pos=64)


@pytest.mark.parametrize("attention, precision", [("materialised", "fp32"), ("sdpa", "fp32"), ("sdpa", "bf16")])
def test_a_stack_stays_bit_identical_on_two_threads(tiny_spec, attention, precision):
    # 4 x 128 rows of d_model 64: each bias gradient sums >= 32,768 numbers, which torch splits across threads.
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_stack_computes_single_refits(demo_spec(tiny_spec), attention, precision, batch=4, pos=128)
    finally:
        torch.set_num_threads(before)


def test_the_loss_of_a_large_batch_stays_bit_identical_on_two_threads(tiny_spec):
    # 40 x 1023 >= 32,768 log-probabilities: one sum of them splits across threads when it has one output (k = 1).
    spec = tiny_spec(n_layers=1, n_ctx=1024)
    tokens = random_tokens(spec, 2, 40, 1024)
    stacked, single = StackedTransformer.from_seeds(spec, [1, 2]), StackedTransformer.from_seeds(spec, [2])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            for model in (stacked, single):  # sharper predictions: log-probabilities of many magnitudes
                model.W_U.mul_(20.0)
            assert torch.equal(single.loss(tokens[1:])[0], stacked.loss(tokens)[1])
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- precision and attention switches
def test_sdpa_matches_materialised_attention(tiny_spec):
    spec = demo_spec(tiny_spec, n_layers=4)
    tokens = random_tokens(spec, 2, 2, spec.n_ctx)
    materialised = StackedTransformer.from_seeds(spec, [1, 2])
    sdpa = StackedTransformer.from_seeds(spec, [1, 2], attention="sdpa")
    expected, found = forward_backward(materialised, tokens), forward_backward(sdpa, tokens)
    terms = path_terms(spec, spec.n_ctx)
    scale = expected[0].abs().max().item()
    torch.testing.assert_close(found[0], expected[0], rtol=0, atol=reduction_atol(np.float32, terms, scale))
    largest = max(g.abs().max().item() for g in expected[2])
    atol = reduction_atol(np.float32, gradient_terms(spec, 2, spec.n_ctx), largest)
    for gradient, reference in zip(found[2], expected[2], strict=True):
        torch.testing.assert_close(gradient, reference, rtol=0, atol=atol)


def test_bf16_logits_match_fp32_within_bfloat16_rounding(tiny_spec):
    spec = demo_spec(tiny_spec, n_layers=4)
    tokens = random_tokens(spec, 2, 2, spec.n_ctx)
    stack = StackedTransformer.from_seeds(spec, [1, 2])
    for i in range(2):
        stack.load_seed_state_dict(i, perturbed_state(spec, seed=i))
    with torch.no_grad():
        expected = stack(tokens)
        stack.precision = "bf16"
        found = stack(tokens)
        loss = stack.loss(tokens)
    assert found.dtype == torch.bfloat16 and loss.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in stack.parameters())  # float32 master weights
    # Each matmul rounds both inputs and its output to bfloat16 (3 unit roundoffs, float32 accumulation); there are
    # 6 per block (q|k|v, q.k, pattern.v, o, in, out) and the unembed on the path, each erring relative to the logits.
    matmuls = spec.n_layers * (4 if spec.attn_only else 6) + 1
    atol = 3 * matmuls * BF16_UNIT_ROUNDOFF * expected.abs().max().item()
    torch.testing.assert_close(found.float(), expected, rtol=0, atol=atol)
    assert 0 < (found.float() - expected).abs().max() < atol  # bf16 did round


def test_tf32_is_fp32_on_the_cpu_and_leaves_the_global_setting_alone(tiny_spec):
    spec = tiny_spec()
    tokens = random_tokens(spec, 2, 2, 16)
    fp32 = StackedTransformer.from_seeds(spec, [1, 2])
    tf32 = StackedTransformer.from_seeds(spec, [1, 2], precision="tf32")
    before = torch.get_float32_matmul_precision()
    expected, found = forward_backward(fp32, tokens), forward_backward(tf32, tokens)
    assert torch.get_float32_matmul_precision() == before
    assert torch.equal(found[0], expected[0])
    assert all(torch.equal(g, h) for g, h in zip(found[2], expected[2], strict=True))


# ---------------------------------------------------------------- the padded vocabulary
def test_a_padded_vocabulary_computes_the_unpadded_models_numbers_and_exports_its_shapes(tiny_spec):
    spec = tiny_spec(optimizer="adamw", weight_decay=0.1)  # vocab 32 -> 128 inside the model
    padded, unpadded = (StackedTransformer(spec, 2, vocab_multiple=multiple) for multiple in (128, 1))
    for model in (padded, unpadded):
        for i in range(2):
            model.load_seed_state_dict(i, perturbed_state(spec, seed=i))
    assert padded.W_E.shape == (2, 128, 16) and padded.W_U.shape == (2, 16, 128) and unpadded.W_U.shape == (2, 16, 32)
    shapes = {name: t.shape for name, t in unpadded.seed_state_dict(1).items()}
    assert {name: t.shape for name, t in padded.seed_state_dict(1).items()} == shapes
    tokens = random_tokens(spec, 2, 3, spec.n_ctx)
    expected, found = forward_backward(unpadded, tokens), forward_backward(padded, tokens)
    assert found[0].shape == expected[0].shape == (2, 3, spec.n_ctx, 32)
    scale = expected[0].abs().max().item()
    torch.testing.assert_close(found[0], expected[0], rtol=0, atol=reduction_atol(np.float32, spec.d_model, scale))
    atol = reduction_atol(np.float32, loss_terms(spec, 3, spec.n_ctx), scale)
    torch.testing.assert_close(found[1], expected[1], rtol=0, atol=atol)
    assert torch.count_nonzero(padded.W_E.grad[:, 32:]) == torch.count_nonzero(padded.W_U.grad[:, :, 32:]) == 0
    for i in range(2):
        for name, gradient in stack_gradients(padded, i).items():
            reference = stack_gradients(unpadded, i)[name]
            largest = reference.abs().max().item()
            atol = reduction_atol(np.float32, gradient_terms(spec, 3, spec.n_ctx), largest)
            torch.testing.assert_close(gradient, reference, rtol=0, atol=atol, msg=name)


def test_the_padding_stays_zero_under_adamw_and_states_hold_the_real_vocabulary(tiny_spec):
    from headstab.training.options import TrainingOptions
    from headstab.training.stack import RefitState, assemble, split

    spec = tiny_spec(optimizer="adamw", weight_decay=0.1)
    states = [RefitState(perturbed_state(spec, seed=i)) for i in range(2)]
    model, optimizer = assemble(spec, states, TrainingOptions(device="cpu"), torch.device("cpu"))
    tokens = random_tokens(spec, 2, 3, spec.n_ctx)
    for _ in range(3):
        optimizer.zero_grad(set_to_none=True)
        model.backward(model.loss(tokens))
        optimizer.step()
    assert torch.count_nonzero(model.W_E[:, 32:]) == torch.count_nonzero(model.W_U[:, :, 32:]) == 0
    state = split(model, optimizer, [1])[0]
    assert state.moments["exp_avg"]["W_E"].shape == (32, 16) and state.moments["exp_avg_sq"]["W_U"].shape == (16, 32)
    assert state.weights["unembed.weight"].shape == (32, 16) and state.weights["unembed.weight"].is_contiguous()
    again, again_optimizer = assemble(
        spec, split(model, optimizer, [0, 1]), TrainingOptions(device="cpu"), torch.device("cpu")
    )
    for p, q in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(optimizer.state[p][key], again_optimizer.state[q][key])


def test_vocab_multiple_below_one_is_refused(tiny_spec):
    with pytest.raises(ConfigError, match="vocab_multiple 0 must be a positive integer"):
        StackedTransformer(tiny_spec(), 1, vocab_multiple=0)
