"""A planted positive control: 2-layer attention-only TransformerLens 2 refits whose heads are written by hand.

Layer 0 holds a previous-token head and a BOS head, layer 1 an induction head made by K-composition with
the previous-token head's OV output, whose own OV circuit copies the attended token to the logits (Olsson et
al. 2022's prefix matching and copying); every other head is random, with a small output in a subspace nobody
reads. The planted heads sit at seed-dependent indices, and each refit has its own
residual basis and token vectors, so only the heads' functions are shared.

The residual stream (d_model) is split into orthonormal subspaces orthogonal to the all-ones vector, so
LayerNorm's centring is the identity and, with every token vector and position vector of fixed norm, its
scaling is the same at every position but 0:
- TOK: the token's identity, a random unit vector per vocabulary id, times A;
- PREV: the previous token's identity, written there by the previous-token head;
- POS: sinusoidal positions cos/sin(w_f i) of fixed norm B, so that shifting by one is a rotation;
- BOSDIR: one direction, present at position 0 only;
- NOISE: where the random heads write.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from headstab.plan.sources import default_refit_file
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.published import tl2_shapes

N_TOK, N_FREQ = 56, 16  # TOK and PREV: 56 dimensions each; POS: 2 x 16
# Attention logits (after the 1/sqrt(d_head) scale): a planted head's chosen key, and the induction head's
# BOS default when the current token has no earlier copy.
PEAK, INDUCTION_DEFAULT = 40.0, 25.0
RANDOM_LOGIT_STD = 1.5  # the random heads' attention logits: peaked, content- and position-dependent
FREQUENCIES = np.random.default_rng(12345).uniform(0.1, np.pi, size=N_FREQ)  # the same in every refit
ROLES = ("previous_token", "bos", "induction")


def subspaces(spec: ArchitectureSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Orthonormal column blocks [d_model, k] of one refit's residual basis, orthogonal to the ones vector."""
    d = spec.d_model
    centred = rng.normal(size=(d, d))
    centred -= centred.mean(axis=0, keepdims=True)
    basis = np.linalg.qr(centred)[0][:, : d - 1]  # the first d - 1 columns span the centred space
    edges = np.cumsum([0, N_TOK, N_TOK, 2 * N_FREQ, 1])
    names = ("tok", "prev", "pos", "bos")
    blocks = {name: basis[:, edges[k] : edges[k + 1]] for k, name in enumerate(names)}
    blocks["noise"] = basis[:, edges[-1] :]
    return blocks


def planted_roles(spec: ArchitectureSpec, seed: int) -> dict[tuple[int, int], str]:
    """{(layer, head): role} of refit `seed`: the three planted heads at seed-dependent indices, the rest "random"."""
    rng = np.random.default_rng(1000 + seed)
    layer0, layer1 = rng.permutation(spec.n_heads), rng.permutation(spec.n_heads)
    roles = {(layer, head): "random" for layer in range(spec.n_layers) for head in range(spec.n_heads)}
    roles[(0, int(layer0[0]))], roles[(0, int(layer0[1]))] = "previous_token", "bos"
    roles[(1, int(layer1[0]))] = "induction"
    return roles


def _positions(spec: ArchitectureSpec, norm: float) -> np.ndarray:
    """[n_ctx, 2 N_FREQ] POS coordinates of each position: (cos w_f i, sin w_f i) pairs, of norm `norm`."""
    angles = np.arange(spec.n_ctx)[:, None] * FREQUENCIES[None, :]
    return np.stack([np.cos(angles), np.sin(angles)], axis=-1).reshape(spec.n_ctx, -1) * norm / np.sqrt(N_FREQ)


def _shift_back() -> np.ndarray:
    """[2 N_FREQ, 2 N_FREQ] M with (coords of position i) @ M = coords of position i - 1: a rotation by -w_f."""
    out = np.zeros((2 * N_FREQ, 2 * N_FREQ))
    for f, w in enumerate(FREQUENCIES):
        out[2 * f : 2 * f + 2, 2 * f : 2 * f + 2] = [[np.cos(w), -np.sin(w)], [np.sin(w), np.cos(w)]]
    return out


def planted_state_dict(spec: ArchitectureSpec, seed: int) -> dict[str, torch.Tensor]:
    """A HookedTransformer (TransformerLens 2) state dict of `spec` (attention-only, 2 layers, LayerNorm) with
    the heads of `planted_roles(spec, seed)`; d_head must hold N_TOK + 1 dimensions."""
    if spec.n_layers != 2 or not spec.attn_only or spec.d_head < N_TOK + 1 or spec.d_model < 2 * N_TOK + 2 * N_FREQ + 8:
        raise ValueError(f"the planted circuit needs 2 attention-only layers, d_head > {N_TOK}, a wider d_model")
    rng = np.random.default_rng(seed)
    blocks = subspaces(spec, rng)
    d, dh, half = spec.d_model, spec.d_head, np.sqrt(spec.d_model / 2)  # |token| = |position| = sqrt(d / 2)
    tokens = rng.normal(size=(spec.d_vocab, N_TOK))
    tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
    bos_norm = half * 0.7
    state = {name: np.zeros(shape) for name, shape in tl2_shapes(spec).items()}
    state["embed.W_E"] = half * tokens @ blocks["tok"].T
    state["pos_embed.W_pos"] = _positions(spec, half) @ blocks["pos"].T
    state["pos_embed.W_pos"][0] += bos_norm * blocks["bos"][:, 0]
    # LayerNorm scales: layer 0 at position 0 (the BOS direction added); layer 1 (the previous token copied in)
    scale0_bos = np.sqrt(d / (d + bos_norm**2))
    scale1, scale1_bos = np.sqrt(d / (1.5 * d)), np.sqrt(d / (d + bos_norm**2 + 0.5 * d * scale0_bos**2))
    readable = np.concatenate([blocks["tok"], blocks["pos"], blocks["noise"]], axis=1)
    for (layer, head), role in planted_roles(spec, seed).items():
        prefix = f"blocks.{layer}.attn"
        w_q, w_k, w_v, w_o = (state[f"{prefix}.W_{m}"][head] for m in "QKVO")
        b_q = state[f"{prefix}.b_Q"][head]
        if role == "previous_token":  # q_i = coords of position i - 1, k_j = coords of j
            w_q[:, : 2 * N_FREQ] = blocks["pos"] @ _shift_back() * PEAK * np.sqrt(dh) / half**2
            w_k[:, : 2 * N_FREQ] = blocks["pos"]
            w_v[:, :N_TOK] = blocks["tok"]  # OV: the attended token's identity into PREV
            w_o[:N_TOK] = blocks["prev"].T
        elif role == "bos":  # a constant query against the BOS direction
            b_q[0] = PEAK * np.sqrt(dh) / (bos_norm * scale0_bos)
            w_k[:, 0] = blocks["bos"][:, 0]
        elif role == "induction":  # current token (TOK) against the key's previous token (PREV); else BOS
            w_q[:, :N_TOK] = blocks["tok"] * PEAK * np.sqrt(dh) / (scale1 * half) ** 2
            w_k[:, :N_TOK] = blocks["prev"]
            b_q[N_TOK] = INDUCTION_DEFAULT * np.sqrt(dh) / (bos_norm * scale1_bos)
            w_k[:, N_TOK] = blocks["bos"][:, 0]
            w_v[:, :N_TOK] = blocks["tok"]  # OV: copies the attended token's identity, which the unembedding reads
            w_o[:N_TOK] = blocks["tok"].T
        else:  # random logits of std RANDOM_LOGIT_STD from tokens and positions; a small output into NOISE
            sigma = np.sqrt(RANDOM_LOGIT_STD / d)
            w_q[:] = readable @ readable.T @ rng.normal(0.0, sigma, size=(d, dh))
            w_k[:] = readable @ readable.T @ rng.normal(0.0, sigma, size=(d, dh))
            w_v[:] = rng.normal(0.0, 0.01, size=(d, dh))
            w_o[:] = rng.normal(0.0, 0.01, size=(dh, blocks["noise"].shape[1])) @ blocks["noise"].T
    for layer in range(spec.n_layers):
        state[f"blocks.{layer}.ln1.w"][:] = 1.0
    state["ln_final.w"][:] = 1.0
    # the unembedding reads TOK (each token's logit from its own vector), so the induction head's OV circuit copies
    state["unembed.W_U"] = blocks["tok"] @ tokens.T + rng.normal(0.0, 0.02, size=(d, spec.d_vocab))
    return {name: torch.tensor(values, dtype=torch.float32) for name, values in state.items()}


def write_planted_mirror(root: Path, spec: ArchitectureSpec, seeds: tuple[int, ...]) -> Path:
    """The published repository's layout under `root` ({arch}/<refit folder>/final.pt per seed), planted refits."""
    for seed in seeds:
        path = root / default_refit_file(spec).format(arch=spec.name, seed=seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(planted_state_dict(spec, seed), path)
    return root
