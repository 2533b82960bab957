"""TransformerLens 2 weight processing on load, as the authors' analyses applied it (docs/fidelity.md).

The paper's analysis notebooks loaded each refit into a TransformerLens 2 `HookedTransformer` with
`load_and_process_state_dict(sd, fold_ln=False)`, which still centres the weights that write into the
residual stream, centres the unembedding and folds the value biases into the output bias. None changes
the model's attention patterns or its log-probabilities (every reader of the residual stream is a
LayerNorm, which removes the mean; centring W_U over the vocabulary shifts each position's logits by
one constant, which log-softmax removes; a softmax row sums to one), but two change cached
activations: centring removes each residual vector's mean over d_model (`hook_resid_*`), folding
removes b_V from every head's `hook_z`. Config key `analysis.weight_processing` lists the steps
applied before caching and measuring; none by default.

State dicts use the bridge's nn.Linear names and layout: `blocks.{l}.attn.o.weight` is
[d_model, n_heads * d_head], `blocks.{l}.attn.v.bias` [n_heads * d_head], `embed.weight`
[d_vocab, d_model], `pos_embed.weight` [n_ctx, d_model], `blocks.{l}.mlp.out.weight` [d_model, d_mlp].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from headstab.plan.spec import ArchitectureSpec

WEIGHT_PROCESSING_STEPS = ("center_writing_weights", "center_unembed", "fold_value_biases")


def _centred_rows(weight: torch.Tensor) -> torch.Tensor:
    """[..., d_model] minus its mean over d_model."""
    return weight - weight.mean(dim=-1, keepdim=True)


def _centred_columns(weight: torch.Tensor) -> torch.Tensor:
    """nn.Linear [d_model, in] minus its mean over d_model (the output axis)."""
    return weight - weight.mean(dim=0, keepdim=True)


def center_writing_weights(state: Mapping[str, torch.Tensor], spec: ArchitectureSpec) -> dict[str, torch.Tensor]:
    """Remove the mean over d_model from every weight and bias that writes into the residual stream
    (embeddings, attention and MLP outputs), as TransformerLens 2's `center_writing_weights`."""
    if spec.normalization_type not in ("LN", "LNPre"):
        raise ValueError(
            f"center_writing_weights needs LayerNorm (normalization_type LN or LNPre) to leave the model's outputs "
            f"unchanged; architecture '{spec.name}' uses {spec.normalization_type}: remove it from "
            "analysis.weight_processing"
        )
    out = dict(state)
    out["embed.weight"] = _centred_rows(state["embed.weight"])
    if "pos_embed.weight" in state:
        out["pos_embed.weight"] = _centred_rows(state["pos_embed.weight"])
    writers = ["attn.o"] + ([] if spec.attn_only else ["mlp.out"])
    for layer in range(spec.n_layers):
        for writer in writers:
            out[f"blocks.{layer}.{writer}.weight"] = _centred_columns(state[f"blocks.{layer}.{writer}.weight"])
            bias = f"blocks.{layer}.{writer}.bias"
            if bias in state:
                out[bias] = _centred_rows(state[bias])
    return out


def center_unembed(state: Mapping[str, torch.Tensor], spec: ArchitectureSpec) -> dict[str, torch.Tensor]:
    """Remove the mean over the vocabulary from the unembedding and its bias, as TransformerLens 2's
    `center_unembed`: each position's logits move by one constant, log-probabilities not at all."""
    out = dict(state)
    out["unembed.weight"] = _centred_columns(state["unembed.weight"])  # nn.Linear [d_vocab, d_model]
    if "unembed.bias" in state:
        out["unembed.bias"] = state["unembed.bias"] - state["unembed.bias"].mean()
    return out


def fold_value_biases(state: Mapping[str, torch.Tensor], spec: ArchitectureSpec) -> dict[str, torch.Tensor]:
    """Move every head's value bias into the attention output bias: b_O += W_O b_V, b_V = 0
    (TransformerLens 2's `fold_value_biases`; exact because each softmax row sums to one)."""
    out = dict(state)
    for layer in range(spec.n_layers):
        value_bias = state[f"blocks.{layer}.attn.v.bias"]
        output = f"blocks.{layer}.attn.o"
        out[f"{output}.bias"] = state[f"{output}.bias"] + state[f"{output}.weight"] @ value_bias
        out[f"blocks.{layer}.attn.v.bias"] = torch.zeros_like(value_bias)
    return out


def process_weights(
    state: Mapping[str, torch.Tensor], spec: ArchitectureSpec, steps: Sequence[str]
) -> dict[str, torch.Tensor]:
    """`state` with the named steps applied, in TransformerLens 2's order (centring the writing weights, then
    the unembedding, then folding)."""
    unknown = [step for step in steps if step not in WEIGHT_PROCESSING_STEPS]
    if unknown:
        raise ValueError(
            f"unknown weight processing {unknown} (config key analysis.weight_processing); "
            f"choose from {list(WEIGHT_PROCESSING_STEPS)}"
        )
    processed = dict(state)
    if "center_writing_weights" in steps:
        processed = center_writing_weights(processed, spec)
    if "center_unembed" in steps:
        processed = center_unembed(processed, spec)
    if "fold_value_biases" in steps:
        processed = fold_value_biases(processed, spec)
    return processed
