"""Known-tensor TransformerLens 2 refits for the published-refit tests: state dicts and a local mirror."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import scipy.special
import torch

from headstab.plan.sources import default_refit_file
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.published import tl2_shapes


def tl2_state_dict(spec: ArchitectureSpec, seed: int, with_buffers: bool = True) -> dict[str, torch.Tensor]:
    """A HookedTransformer state dict of `spec` with seeded N(0, 0.5) tensors (LayerNorm weights around 1),
    plus the buffers TransformerLens 2 saves (attention mask, IGNORE) when asked."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, shape in tl2_shapes(spec).items():
        values = rng.normal(0.0, 0.5, size=shape)
        if name.endswith((".w",)):
            values = 1.0 + 0.2 * values
        state[name] = torch.tensor(values, dtype=torch.float32)
    if with_buffers:
        for layer in range(spec.n_layers):
            state[f"blocks.{layer}.attn.mask"] = torch.tril(torch.ones(spec.n_ctx, spec.n_ctx, dtype=torch.bool))
            state[f"blocks.{layer}.attn.IGNORE"] = torch.tensor(-1e5)
    return state


def write_mirror(root: Path, spec: ArchitectureSpec, seeds: tuple[int, ...], wrap: bool = False) -> Path:
    """A local copy of the published repository's layout under `root`: {arch}/<refit folder>/final.pt per seed."""
    for seed in seeds:
        path = root / default_refit_file(spec).format(arch=spec.name, seed=seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = tl2_state_dict(spec, seed)
        torch.save({"model_state_dict": state, "epoch": 1} if wrap else state, path)
    return root


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    x = x - x.mean(-1, keepdims=True)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight + bias


def _attention(raw: dict[str, np.ndarray], x: np.ndarray, layer: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """One block's attention patterns [batch, head, query, key] and output [batch, pos, d_model] on residual x."""
    block = f"blocks.{layer}"
    x = _layer_norm(x, raw[f"{block}.ln1.w"], raw[f"{block}.ln1.b"], eps)
    q, k, v = (
        np.einsum("bpm,hmd->bhpd", x, raw[f"{block}.attn.W_{name}"]) + raw[f"{block}.attn.b_{name}"][None, :, None, :]
        for name in "QKV"
    )
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    n = x.shape[1]
    scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    patterns = scores / scores.sum(-1, keepdims=True)
    out = np.einsum("bhqd,hdm->bqm", patterns @ v, raw[f"{block}.attn.W_O"]) + raw[f"{block}.attn.b_O"]
    return patterns, out


def _embed(state: dict[str, torch.Tensor], tokens: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    raw = {name: tensor.double().numpy() for name, tensor in state.items()}
    return raw, raw["embed.W_E"][tokens] + raw["pos_embed.W_pos"][: tokens.shape[1]]


def numpy_layer0_patterns(state: dict[str, torch.Tensor], tokens: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Layer-0 attention patterns [batch, head, query, key] straight from the raw TL2 tensors (float64)."""
    raw, x = _embed(state, tokens)
    return _attention(raw, x, 0, eps)[0]


def numpy_mlp_post(state: dict[str, torch.Tensor], tokens: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Every layer's MLP activation gelu(ln2(resid_mid) W_in + b_in) (exact GELU, act_fn gelu) straight from the
    raw TL2 tensors of an MLP architecture, float64 [layer, batch, pos, d_mlp]."""
    raw, x = _embed(state, tokens)
    posts = []
    for layer in range(sum(name.endswith(".mlp.W_in") for name in raw)):
        block = f"blocks.{layer}"
        x = x + _attention(raw, x, layer, eps)[1]
        pre = _layer_norm(x, raw[f"{block}.ln2.w"], raw[f"{block}.ln2.b"], eps) @ raw[f"{block}.mlp.W_in"]
        pre = pre + raw[f"{block}.mlp.b_in"]
        posts.append(0.5 * pre * (1.0 + scipy.special.erf(pre / np.sqrt(2.0))))
        x = x + posts[-1] @ raw[f"{block}.mlp.W_out"] + raw[f"{block}.mlp.b_out"]
    return np.stack(posts)


class CallsCode:
    """Unpickling this calls `function(*args)`: what a malicious checkpoint does."""

    def __init__(self, function: Any, args: tuple[Any, ...]) -> None:
        self.function, self.args = function, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.function, self.args


def code_payloads(marker: Path) -> dict[str, CallsCode]:
    """{name of the called function: a payload that creates `marker` when unpickled}."""
    return {
        "system": CallsCode(os.system, (f"touch {marker}",)),
        "call": CallsCode(subprocess.call, (["touch", str(marker)],)),
        "exec": CallsCode(exec, (f"open({str(marker)!r}, 'w').close()",)),
    }
