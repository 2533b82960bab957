"""The training model: k refits of one architecture in one plain PyTorch module, weights stacked on a seed axis.

Every parameter has a leading seed axis of size k (k = 1 runs the same code), and every product is a
batched matmul over that axis (`torch.baddbmm`, `torch.bmm`), so seed i's numbers never meet seed j's:
the stack computes what k separate models would, bit for bit on the CPU (tests/training/test_model.py).
It computes TransformerLens 4's native GPT model (the one `headstab.refits.models.build_model` wraps in a
TransformerBridge): pre-norm blocks, causal attention scaled by 1/sqrt(d_head), untied embeddings.

Layout: matrices are stored [seed, in, out] so a forward needs no transposes, q|k|v as one fused
[seed, d_model, 3 * n_heads * d_head] matrix. `bridge_tensors` maps every TransformerBridge state-dict
name (`embed.weight`, `blocks.{layer}.attn.q.weight`, ...) to a [seed, *bridge shape] view of these
parameters; `seed_state_dict(i)` and `load_seed_state_dict(i, state)` go through it, so a refit's
checkpoint is the bridge's state dict, which `headstab.refits.models.load_trained_model` reads unchanged.

The vocabulary is padded inside the model to a multiple of `vocab_multiple` (128: aligned rows for the largest
GEMM, the unembedding); the padded embedding rows are never read, the padded logits are -inf in the loss, so
their weights get no gradient and stay zero, and `bridge_tensors` views only the real vocabulary: checkpoints
hold the real shapes. The loss never stores the [seed, batch, pos, vocab] logits: `chunked_cross_entropy`
(headstab.training.cross_entropy) reduces them chunk by chunk.

Switches (plain arguments): precision `fp32`, `tf32` (TF32 matmuls on CUDA; the same as fp32 on the
CPU) or `bf16` (autocast to bfloat16, float32 master weights and loss); attention `materialised`
(scores and softmax as tensors) or `sdpa` (torch's fused scaled_dot_product_attention).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from headstab.plan.spec import ArchitectureSpec, ConfigError
from headstab.refits.models import shape_mismatch
from headstab.training.cross_entropy import chunked_cross_entropy
from headstab.training.initial_weights import INIT_MODES, NORMS_WITH_BIAS, NORMS_WITH_WEIGHT, initial_state_dict

EPS = 1e-5  # TransformerBridgeConfig's eps, of every norm
ROTARY_BASE = 10000.0  # TransformerBridgeConfig's rotary_base; rotary_dim is d_head
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": functools.partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}
NORMALIZATIONS = ("LN", "LNPre", "RMS", "RMSPre")
POSITIONAL_EMBEDDINGS = ("standard", "rotary")
PRECISIONS = ("fp32", "tf32", "bf16")
ATTENTION_KERNELS = ("materialised", "sdpa")
VOCAB_MULTIPLE = 128  # padded vocabulary: GEMM rows aligned to what tensor cores tile
VOCAB_AXES = {"W_E": -2, "W_U": -1}  # parameter name -> its vocabulary axis, padded inside the model


def check_trainable(spec: ArchitectureSpec) -> None:
    """Raise ConfigError naming the key and value of any option of `spec` this model does not implement."""
    options = {
        "act_fn": tuple(ACTIVATIONS),
        "normalization_type": NORMALIZATIONS,
        "positional_embedding_type": POSITIONAL_EMBEDDINGS,
        "init_mode": INIT_MODES,
    }
    for key, allowed in options.items():
        value = getattr(spec, key)
        if value not in allowed:
            raise ConfigError(
                f"config key 'architectures.{spec.name}.{key}': {value!r} is not implemented by the training model "
                f"(headstab.training.model); use one of {', '.join(allowed)}"
            )
    if spec.positional_embedding_type == "rotary" and spec.d_head % 2:
        raise ConfigError(
            f"config key 'architectures.{spec.name}.d_head': rotary embeddings rotate pairs of "
            f"dimensions, so d_head must be even, not {spec.d_head}"
        )


class Norm(nn.Module):
    """LayerNorm (LN), RMSNorm (RMS) or their parameter-free variants (LNPre, RMSPre) over d_model, per seed."""

    def __init__(self, kind: str, n_seeds: int, d_model: int):
        super().__init__()
        self.kind, self.d_model = kind, d_model
        self.weight = nn.Parameter(torch.ones(n_seeds, d_model)) if kind in NORMS_WITH_WEIGHT else None
        self.bias = nn.Parameter(torch.zeros(n_seeds, d_model)) if kind in NORMS_WITH_BIAS else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [seed, batch * pos, d_model] -> the same shape."""
        if self.kind.startswith("LN"):
            x = F.layer_norm(x, (self.d_model,), eps=EPS)
        else:
            x = F.rms_norm(x, (self.d_model,), eps=EPS)
        if self.bias is not None:
            return torch.addcmul(self.bias[:, None], x, self.weight[:, None])
        return x * self.weight[:, None] if self.weight is not None else x


class Rotary(nn.Module):
    """Rotary position embedding of q and k: adjacent pairs of all d_head dimensions, as TransformerLens's native model."""

    def __init__(self, spec: ArchitectureSpec):
        super().__init__()
        inv_freq = 1.0 / (ROTARY_BASE ** (torch.arange(0, spec.d_head, 2).float() / spec.d_head))
        angles = torch.outer(torch.arange(spec.n_ctx).float(), inv_freq).repeat_interleave(2, dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)  # [n_ctx, d_head]
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [seed * batch, head, pos, d_head] -> the same, rotated by position."""
        pos = x.shape[-2]
        pairs = x.unflatten(-1, (-1, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (x0, x1) -> (-x1, x0)
        return x * self.cos[:pos] + rotated * self.sin[:pos]


class Attention(nn.Module):
    """Causal multi-head self-attention of every seed, q|k|v fused in one matrix."""

    def __init__(self, spec: ArchitectureSpec, n_seeds: int):
        super().__init__()
        self.n_heads, self.d_head = spec.n_heads, spec.d_head
        d_attn = spec.n_heads * spec.d_head
        self.W_QKV = nn.Parameter(torch.zeros(n_seeds, spec.d_model, 3 * d_attn))  # columns q | k | v, head-major
        self.b_QKV = nn.Parameter(torch.zeros(n_seeds, 3 * d_attn))
        self.W_O = nn.Parameter(torch.zeros(n_seeds, d_attn, spec.d_model))
        self.b_O = nn.Parameter(torch.zeros(n_seeds, spec.d_model))

    def forward(
        self, x: torch.Tensor, batch: int, kernel: str, causal_mask: torch.Tensor, rotary: Rotary | None
    ) -> torch.Tensor:
        """x [seed, batch * pos, d_model] -> attention output [seed, batch * pos, d_model].

        causal_mask: [pos, pos], 0 on and below the diagonal, -inf above (added to the scores).
        """
        n_seeds, rows, _ = x.shape
        pos = rows // batch
        qkv = torch.baddbmm(self.b_QKV[:, None], x, self.W_QKV)
        # -> 3 x [seed * batch, head, pos, d_head], views of qkv
        q, k, v = qkv.view(n_seeds * batch, pos, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4).unbind(0)
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        if kernel == "sdpa":
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = torch.baddbmm(
                causal_mask, q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2), alpha=self.d_head**-0.5
            )
            z = torch.bmm(scores.softmax(dim=-1), v.flatten(0, 1)).view(n_seeds * batch, self.n_heads, pos, -1)
        z = z.transpose(1, 2).reshape(n_seeds, rows, -1)  # [seed, batch * pos, head * d_head]
        return torch.baddbmm(self.b_O[:, None], z, self.W_O)


class MLP(nn.Module):
    """The two-layer MLP of every seed."""

    def __init__(self, spec: ArchitectureSpec, n_seeds: int):
        super().__init__()
        self.act = ACTIVATIONS[spec.act_fn]
        self.W_in = nn.Parameter(torch.zeros(n_seeds, spec.d_model, spec.d_mlp))
        self.b_in = nn.Parameter(torch.zeros(n_seeds, spec.d_mlp))
        self.W_out = nn.Parameter(torch.zeros(n_seeds, spec.d_mlp, spec.d_model))
        self.b_out = nn.Parameter(torch.zeros(n_seeds, spec.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [seed, batch * pos, d_model] -> the same shape."""
        hidden = self.act(torch.baddbmm(self.b_in[:, None], x, self.W_in))
        return torch.baddbmm(self.b_out[:, None], hidden, self.W_out)


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) unless attention-only."""

    def __init__(self, spec: ArchitectureSpec, n_seeds: int):
        super().__init__()
        self.ln1 = Norm(spec.normalization_type, n_seeds, spec.d_model)
        self.attn = Attention(spec, n_seeds)
        self.ln2 = None if spec.attn_only else Norm(spec.normalization_type, n_seeds, spec.d_model)
        self.mlp = None if spec.attn_only else MLP(spec, n_seeds)

    def forward(
        self, x: torch.Tensor, batch: int, kernel: str, causal_mask: torch.Tensor, rotary: Rotary | None
    ) -> torch.Tensor:
        """x [seed, batch * pos, d_model] (the residual stream) -> the same shape."""
        x = x + self.attn(self.ln1(x), batch, kernel, causal_mask, rotary)
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x))
        return x


class StackedTransformer(nn.Module):
    """k independently initialised and trained refits of `spec`, as one module with a leading seed axis.

    Train with `model.backward(model.loss(tokens))`: the loss is [seed], and summing it before the
    backward pass gives each seed the gradient of its own loss (seeds share no parameter).
    """

    def __init__(
        self,
        spec: ArchitectureSpec,
        n_seeds: int,
        attention: str = "materialised",
        precision: str = "fp32",
        vocab_multiple: int = VOCAB_MULTIPLE,
    ):
        super().__init__()
        check_trainable(spec)
        for name, value, allowed in (("attention", attention, ATTENTION_KERNELS), ("precision", precision, PRECISIONS)):
            if value not in allowed:
                raise ConfigError(f"training model {name} {value!r} is unknown; use one of {', '.join(allowed)}")
        if vocab_multiple < 1:
            raise ConfigError(f"training model vocab_multiple {vocab_multiple} must be a positive integer")
        self.spec, self.n_seeds, self.attention, self.precision = spec, n_seeds, attention, precision
        self.d_vocab_padded = -(-spec.d_vocab // vocab_multiple) * vocab_multiple
        self.W_E = nn.Parameter(torch.zeros(n_seeds, self.d_vocab_padded, spec.d_model))
        standard = spec.positional_embedding_type == "standard"
        self.W_pos = nn.Parameter(torch.zeros(n_seeds, spec.n_ctx, spec.d_model)) if standard else None
        self.rotary = None if standard else Rotary(spec)
        self.blocks = nn.ModuleList(Block(spec, n_seeds) for _ in range(spec.n_layers))
        self.ln_final = Norm(spec.normalization_type, n_seeds, spec.d_model)
        self.W_U = nn.Parameter(torch.zeros(n_seeds, spec.d_model, self.d_vocab_padded))
        self.register_buffer("b_U", torch.zeros(n_seeds, spec.d_vocab))  # the bridge's unembed.bias: 0, never trained
        mask = torch.full((spec.n_ctx, spec.n_ctx), float("-inf")).triu(diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    @classmethod
    def from_seeds(
        cls, spec: ArchitectureSpec, seeds: Sequence[int], device: str | torch.device = "cpu", **switches: str
    ) -> StackedTransformer:
        """A stack of len(seeds) refits at step 0, refit i bit-identical to `build_model(spec, seeds[i])`."""
        model = cls(spec, len(seeds), **switches)
        for i, seed in enumerate(seeds):
            model.load_seed_state_dict(i, initial_state_dict(spec, seed))
        return model.to(device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [seed, batch, pos] (each seed its own batch) -> logits [seed, batch, pos, d_vocab].

        The unembed bias is zero and not added. Under precision bf16 the logits are bfloat16.
        """
        n_seeds, batch, pos = tokens.shape
        with self._matmul_precision(), torch.autocast(tokens.device.type, torch.bfloat16, self.precision == "bf16"):
            logits = torch.bmm(self._final_residual(tokens), self.W_U)[..., : self.spec.d_vocab]
            return logits.reshape(n_seeds, batch, pos, self.spec.d_vocab)

    def _final_residual(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [seed, batch, pos] -> ln_final of the residual stream, [seed, batch * pos, d_model] (call in autocast)."""
        n_seeds, batch, pos = tokens.shape
        d_vocab, d_model = self.d_vocab_padded, self.spec.d_model
        # Seed s reads rows s * d_vocab ... of the flattened [seed * d_vocab, d_model] embedding.
        offsets = torch.arange(0, n_seeds * d_vocab, d_vocab, device=tokens.device)
        x = F.embedding((tokens + offsets[:, None, None]).view(n_seeds, -1), self.W_E.view(-1, d_model))
        if self.W_pos is not None:
            x = (x.view(n_seeds, batch, pos, d_model) + self.W_pos[:, None, :pos]).view(n_seeds, -1, d_model)
        mask = self.causal_mask[:pos, :pos]
        for block in self.blocks:
            x = block(x, batch, self.attention, mask, self.rotary)
        return self.ln_final(x)

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross entropy of each seed's batch, [seed], float32 (TransformerLens's formula), from
        `chunked_cross_entropy` over the real vocabulary: the logits of every position but the last."""
        n_seeds, batch, pos = tokens.shape
        with self._matmul_precision(), torch.autocast(tokens.device.type, torch.bfloat16, self.precision == "bf16"):
            h = (
                self._final_residual(tokens)
                .view(n_seeds, batch, pos, -1)[:, :, :-1]
                .reshape(n_seeds, -1, self.spec.d_model)
            )
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32  # what autocast's bmm would take
            targets = tokens[:, :, 1:].reshape(n_seeds, -1)
            losses = chunked_cross_entropy(h.to(dtype), self.W_U.to(dtype), targets, self.spec.d_vocab)
        # Positions, then batch: one sum over both would be split across threads when k = 1 (a single output).
        return losses.view(n_seeds, batch, pos - 1).sum(dim=-1).sum(dim=-1) / (batch * (pos - 1))

    def matmul_precision(self) -> contextlib.AbstractContextManager[None]:
        """The precision's float32 matmul setting for code that calls this model compiled (see `_matmul_precision`)."""
        return self._matmul_precision()

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of every seed's own loss (`loss` [seed]), with the precision's matmuls."""
        with self._matmul_precision():
            loss.sum().backward()

    @contextlib.contextmanager
    def _matmul_precision(self) -> Iterator[None]:
        """TF32 float32 matmuls for precision tf32, full float32 otherwise; the previous setting is restored.

        Inside a torch.compile'd call it does nothing (the setting is global state the compiler cannot trace):
        the caller runs the compiled call inside `matmul_precision()`.
        """
        if torch.compiler.is_compiling():
            yield
            return
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.precision == "tf32" else "highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)

    # ---------------------------------------------------------------- bridge state dicts
    def bridge_tensors(self) -> dict[str, torch.Tensor]:
        """Every TransformerBridge state-dict name -> a [seed, *bridge shape] view of this stack's tensors."""
        d_attn = self.spec.n_heads * self.spec.d_head
        views = {"embed.weight": self.W_E[:, : self.spec.d_vocab]}
        if self.W_pos is not None:
            views["pos_embed.weight"] = self.W_pos

        def norm(prefix: str, module: Norm) -> None:
            views.update(
                {
                    f"{prefix}.{name}": t
                    for name, t in (("weight", module.weight), ("bias", module.bias))
                    if t is not None
                }
            )

        for layer, block in enumerate(self.blocks):
            prefix, attn = f"blocks.{layer}", block.attn
            norm(f"{prefix}.ln1", block.ln1)
            for i, name in enumerate("qkv"):
                views[f"{prefix}.attn.{name}.weight"] = attn.W_QKV[:, :, i * d_attn : (i + 1) * d_attn].transpose(1, 2)
                views[f"{prefix}.attn.{name}.bias"] = attn.b_QKV[:, i * d_attn : (i + 1) * d_attn]
            views[f"{prefix}.attn.o.weight"] = attn.W_O.transpose(1, 2)
            views[f"{prefix}.attn.o.bias"] = attn.b_O
            if block.mlp is not None:
                norm(f"{prefix}.ln2", block.ln2)
                views[f"{prefix}.mlp.in.weight"] = block.mlp.W_in.transpose(1, 2)
                views[f"{prefix}.mlp.in.bias"] = block.mlp.b_in
                views[f"{prefix}.mlp.out.weight"] = block.mlp.W_out.transpose(1, 2)
                views[f"{prefix}.mlp.out.bias"] = block.mlp.b_out
        norm("ln_final", self.ln_final)
        views["unembed.weight"] = self.W_U[:, :, : self.spec.d_vocab].transpose(1, 2)
        views["unembed.bias"] = self.b_U
        return views

    def real_vocabulary(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor shaped like parameter `name` (with or without the seed axis) cut to the real vocabulary."""
        if name not in VOCAB_AXES:
            return tensor
        return tensor.narrow(VOCAB_AXES[name], 0, self.spec.d_vocab)

    def padded_vocabulary(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor shaped like parameter `name` over the real vocabulary, zero-padded to the model's vocabulary."""
        if name not in VOCAB_AXES:
            return tensor
        pad = [0, 0] * (-VOCAB_AXES[name] - 1) + [0, self.d_vocab_padded - self.spec.d_vocab]
        return F.pad(tensor, pad)

    def seed_state_dict(self, i: int) -> dict[str, torch.Tensor]:
        """Refit i's weights as a TransformerBridge state dict (bridge names and shapes, no seed axis), copied."""
        return {
            name: t[i].detach().clone(memory_format=torch.contiguous_format)
            for name, t in self.bridge_tensors().items()
        }

    def load_seed_state_dict(self, i: int, state: Mapping[str, torch.Tensor]) -> None:
        """Overwrite refit i's weights with `state`, a TransformerBridge state dict of this architecture."""
        views = self.bridge_tensors()
        expected = {name: tuple(t.shape[1:]) for name, t in views.items()}
        mismatch = shape_mismatch(expected, {name: tuple(t.shape) for name, t in state.items()}, self.spec.name)
        if mismatch:
            raise ValueError(f"state dict does not fit architecture '{self.spec.name}': {mismatch}")
        if torch.count_nonzero(state["unembed.bias"]):
            raise ValueError("state dict has a non-zero unembed.bias, which the training model does not add")
        with torch.no_grad():
            for name, view in views.items():
                view[i].copy_(state[name])
