"""TransformerLens 2 weight processing: the model's outputs stay, the cached activations move as TL2's do."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.refits.models import build_model
from headstab.refits.weight_processing import process_weights

TOKENS = torch.tensor([[0, 5, 9, 3, 17, 2, 30, 11], [0, 4, 4, 8, 1, 19, 7, 25]])
HOOKS = ("blocks.1.attn.hook_pattern", "blocks.1.hook_resid_mid", "blocks.1.attn.hook_z")


def trained_like(tiny_spec, **overrides):
    """A tiny model with non-zero biases everywhere (a fresh init has zero biases: folding would be a no-op)."""
    spec = tiny_spec(**overrides)
    model = build_model(spec, seed=3)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            if name.endswith(".bias"):
                tensor.copy_(0.3 * torch.randn(tensor.shape, generator=generator))
    return spec, model


def run(model, state=None):
    if state is not None:
        model.load_state_dict(state)
    with torch.inference_mode():
        logits, cache = model.run_with_cache(TOKENS, names_filter=lambda name: name in HOOKS)
    return logits.numpy().astype(np.float64), {name: cache[name].numpy().astype(np.float64) for name in HOOKS}


def tolerance(reference: np.ndarray, n_terms: int) -> float:
    """Float32 rounding of sums of n_terms products, relative to the values' scale."""
    return reduction_atol(np.float32, n_terms, float(np.abs(reference).max()))


def test_centring_and_folding_keep_logits_and_patterns_and_move_activations_as_tl2(tiny_spec):
    spec, model = trained_like(tiny_spec)
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    logits, before = run(model)
    processed = process_weights(state, spec, ["center_writing_weights", "fold_value_biases"])
    logits_after, after = run(model, processed)
    np.testing.assert_allclose(logits_after, logits, atol=tolerance(logits, spec.d_model * spec.n_layers * 4))
    pattern = "blocks.1.attn.hook_pattern"
    np.testing.assert_allclose(after[pattern], before[pattern], atol=tolerance(before[pattern], spec.d_model * 4))
    # Centring removes each residual vector's mean over d_model ...
    resid = before["blocks.1.hook_resid_mid"]
    centred = resid - resid.mean(axis=-1, keepdims=True)
    np.testing.assert_allclose(after["blocks.1.hook_resid_mid"], centred, atol=tolerance(resid, spec.d_model * 4))
    # ... and folding removes b_V from every head's output.
    b_v = state["blocks.1.attn.v.bias"].numpy().reshape(spec.n_heads, spec.d_head)
    z = before["blocks.1.attn.hook_z"]
    np.testing.assert_allclose(after["blocks.1.attn.hook_z"], z - b_v, atol=tolerance(z, spec.d_model * 4))
    assert np.abs(b_v).max() > 0.05  # the fold moved something


def test_no_steps_is_the_identity_and_the_input_is_not_modified(tiny_spec):
    spec, model = trained_like(tiny_spec)
    state = model.state_dict()
    copy = {name: tensor.clone() for name, tensor in state.items()}
    assert all(torch.equal(process_weights(state, spec, [])[k], copy[k]) for k in copy)
    process_weights(state, spec, ["center_writing_weights", "fold_value_biases"])
    assert all(torch.equal(state[k], copy[k]) for k in copy)


def test_attention_only_models_centre_without_an_mlp(tiny_spec):
    spec, model = trained_like(tiny_spec, attn_only=True)
    with torch.inference_mode():
        logits = model(TOKENS).numpy().astype(np.float64)
        model.load_state_dict(process_weights(model.state_dict(), spec, ["center_writing_weights"]))
        logits_after = model(TOKENS).numpy().astype(np.float64)
    np.testing.assert_allclose(logits_after, logits, atol=tolerance(logits, spec.d_model * spec.n_layers * 4))


def test_unknown_step_and_rms_norm_are_refused(tiny_spec):
    spec, model = trained_like(tiny_spec)
    with pytest.raises(ValueError, match="analysis.weight_processing"):
        process_weights(model.state_dict(), spec, ["fold_ln"])
    with pytest.raises(ValueError, match="LayerNorm"):
        process_weights(model.state_dict(), tiny_spec(normalization_type="RMS"), ["center_writing_weights"])


def test_load_trained_model_applies_the_configured_processing(tiny_spec, tmp_path):
    from headstab.refits.models import load_trained_model, save_weights

    spec, model = trained_like(tiny_spec)
    save_weights(model, tmp_path / "final.pt")
    plain = load_trained_model(spec, tmp_path / "final.pt")
    folded = load_trained_model(spec, tmp_path / "final.pt", weight_processing=["fold_value_biases"])
    assert torch.equal(plain.state_dict()["blocks.0.attn.v.bias"], model.state_dict()["blocks.0.attn.v.bias"])
    assert not folded.state_dict()["blocks.0.attn.v.bias"].any()
    logits, _ = run(plain)
    folded_logits, _ = run(folded)
    np.testing.assert_allclose(folded_logits, logits, atol=tolerance(logits, spec.d_model * spec.n_layers * 4))


def test_centring_the_unembedding_shifts_each_positions_logits_by_one_constant(tiny_spec):
    spec, model = trained_like(tiny_spec)
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    logits, _ = run(model)
    processed = process_weights(state, spec, ["center_unembed"])
    logits_after, _ = run(model, processed)
    # W_U's rows (one per token) sum to zero per d_model column, b_U sums to zero.
    atol = tolerance(state["unembed.weight"].numpy(), spec.d_vocab)
    np.testing.assert_allclose(processed["unembed.weight"].sum(dim=0).numpy(), 0.0, atol=atol)
    assert abs(float(processed["unembed.bias"].sum())) < tolerance(state["unembed.bias"].numpy(), spec.d_vocab)
    # Logits lose their mean over the vocabulary; log-probabilities stay.
    centred = logits - logits.mean(axis=-1, keepdims=True)
    np.testing.assert_allclose(logits_after, centred, atol=tolerance(logits, spec.d_model * spec.n_layers * 4))
    assert np.abs(logits.mean(axis=-1)).max() > 1e-3  # the centring moved something
