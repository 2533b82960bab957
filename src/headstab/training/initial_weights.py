"""The initial weights of one refit, drawn in plain torch bit-identical to `headstab.refits.models.build_model`.

TransformerLens 4's native init (`transformer_lens.model_bridge.sources.native.init`) seeds one
`torch.Generator` with the refit's seed and draws every weight matrix into a float32 tensor of its
`nn.Linear` / `nn.Embedding` shape, in module order: embed, pos_embed, then per block q, k, v, o (and
mlp in, out), then unembed. Biases start at 0 and norm weights at 1, with no draw. This module repeats
that order draw for draw, so the same seed gives the same bits without building a TransformerBridge;
tests compare it with `build_model` tensor by tensor (torch.equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from headstab.plan.spec import ArchitectureSpec

NORMS_WITH_WEIGHT = ("LN", "RMS")  # LNPre and RMSPre have no parameters
NORMS_WITH_BIAS = ("LN",)
# The non-gpt2 modes take initializer_range as their gain, as TransformerLens's native init does.
_GAINED_INITS: dict[str, Callable[[torch.Tensor, torch.Generator, float], torch.Tensor]] = {
    "xavier_uniform": lambda t, g, gain: nn.init.xavier_uniform_(t, gain=gain, generator=g),
    "xavier_normal": lambda t, g, gain: nn.init.xavier_normal_(t, gain=gain, generator=g),
    "kaiming_uniform": lambda t, g, gain: nn.init.kaiming_uniform_(t, nonlinearity="relu", generator=g).mul_(gain),
    "kaiming_normal": lambda t, g, gain: nn.init.kaiming_normal_(t, nonlinearity="relu", generator=g).mul_(gain),
}
INIT_MODES = ("gpt2", *_GAINED_INITS)


def initial_state_dict(spec: ArchitectureSpec, seed: int, legacy_gpt2_init: bool = True) -> dict[str, torch.Tensor]:
    """State dict (TransformerBridge names and shapes, float32, CPU) of refit `seed` of `spec` at step 0.

    legacy_gpt2_init: as in build_model, undo TransformerLens 4's 1/sqrt(2 n_layers) scale of W_O and
    W_out (drawn scaled, then multiplied back, exactly as build_model does) so every weight matrix
    starts from N(0, initializer_range), the paper's init (docs/fidelity.md).
    """
    generator = torch.Generator().manual_seed(int(seed))
    weight, output = _draws(spec, generator, legacy_gpt2_init)
    d_model, d_attn, norm = spec.d_model, spec.n_heads * spec.d_head, spec.normalization_type

    def norm_state(prefix: str) -> dict[str, torch.Tensor]:
        state = {f"{prefix}.weight": torch.ones(d_model)} if norm in NORMS_WITH_WEIGHT else {}
        return state | ({f"{prefix}.bias": torch.zeros(d_model)} if norm in NORMS_WITH_BIAS else {})

    state = {"embed.weight": weight(spec.d_vocab, d_model)}
    if spec.positional_embedding_type == "standard":
        state["pos_embed.weight"] = weight(spec.n_ctx, d_model)
    for layer in range(spec.n_layers):
        prefix = f"blocks.{layer}"
        state |= norm_state(f"{prefix}.ln1")
        for name in ("q", "k", "v"):
            state[f"{prefix}.attn.{name}.weight"] = weight(d_attn, d_model)
            state[f"{prefix}.attn.{name}.bias"] = torch.zeros(d_attn)
        state[f"{prefix}.attn.o.weight"] = output(d_model, d_attn)
        state[f"{prefix}.attn.o.bias"] = torch.zeros(d_model)
        if not spec.attn_only:
            state |= norm_state(f"{prefix}.ln2")
            state[f"{prefix}.mlp.in.weight"] = weight(spec.d_mlp, d_model)
            state[f"{prefix}.mlp.in.bias"] = torch.zeros(spec.d_mlp)
            state[f"{prefix}.mlp.out.weight"] = output(d_model, spec.d_mlp)
            state[f"{prefix}.mlp.out.bias"] = torch.zeros(d_model)
    state |= norm_state("ln_final")
    state["unembed.weight"] = weight(spec.d_vocab, d_model)
    state["unembed.bias"] = torch.zeros(spec.d_vocab)  # a zero buffer of the bridge, never trained
    return state


def _draws(
    spec: ArchitectureSpec, generator: torch.Generator, legacy_gpt2_init: bool
) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]:
    """(weight, output): draw a [rows, cols] float32 matrix; `output` is the residual output projections' draw."""
    std = spec.initializer_range
    if spec.init_mode == "gpt2":
        residual_scale = 1.0 / math.sqrt(2 * spec.n_layers)

        def weight(*shape: int) -> torch.Tensor:
            return torch.empty(shape).normal_(0.0, std, generator=generator)

        def output(*shape: int) -> torch.Tensor:
            drawn = torch.empty(shape).normal_(0.0, std * residual_scale, generator=generator)
            # build_model's rescale of the already drawn values (not a draw at std: the bits differ).
            return drawn.mul_(math.sqrt(2 * spec.n_layers)) if legacy_gpt2_init else drawn

        return weight, output

    def gained(*shape: int) -> torch.Tensor:
        return _GAINED_INITS[spec.init_mode](torch.empty(shape), generator, std)

    return gained, gained
