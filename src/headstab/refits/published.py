"""The paper's published refits: fetch a TransformerLens 2 `final.pt`, convert it to our checkpoint format.

The authors' files (hub repository `karanbali/attention_head_seed_stability`, headstab.plan.sources) hold a
TransformerLens 2 `HookedTransformer` state dict, or a dict with it under `model_state_dict`, with
per-head attention tensors: `blocks.{l}.attn.W_Q` [n_heads, d_model, d_head], `b_Q` [n_heads, d_head],
`W_O` [n_heads, d_head, d_model], `mlp.W_in` [d_model, d_mlp], `unembed.W_U` [d_model, d_vocab], ...
Our checkpoints (headstab.refits.models) hold the TransformerBridge's nn.Linear layout: `attn.q.weight`
[n_heads * d_head, d_model] with head h in rows h * d_head ... (h + 1) * d_head, `attn.o.weight`
[d_model, n_heads * d_head], `mlp.in.weight` [d_mlp, d_model], `unembed.weight` [d_vocab, d_model].
The conversion only renames, transposes and reshapes: no value changes (TransformerLens 2's load-time
processing is config key analysis.weight_processing, applied when a refit is loaded, as for our own).

Files are read with `torch.load(weights_only=True)` only: a file that needs code to be unpickled is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from headstab.fileio import save_torch_atomic, sha256_file, torch_reason, weights_only_refusal, write_json_atomic
from headstab.plan.sources import PUBLISHED, CheckpointSource
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.models import shape_mismatch

CONVERSION = "transformer_lens2_hooked_transformer_to_bridge/1"
# Buffers a HookedTransformer state dict may carry beside the parameters; not weights, dropped.
BUFFER_SUFFIXES = (".mask", ".IGNORE", "IGNORE", ".rotary_sin", ".rotary_cos")


class PublishedRefitError(ValueError):
    """A published refit file cannot be read or does not fit its architecture; the message names the file."""


def load_tl2_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The HookedTransformer state dict in `path` (unwrapping `model_state_dict`), buffers dropped.

    Raises PublishedRefitError naming the file when it is unreadable, needs unpickling of code, or holds no state dict.
    """
    path = Path(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for truncated or foreign files
        unsafe = weights_only_refusal(error)
        if unsafe is not None:
            raise PublishedRefitError(
                f"published refit {path} cannot be loaded with torch.load(weights_only=True): it needs code to be "
                f"unpickled (it refers to {unsafe}), and torch refused it before running anything. headstab never "
                "unpickles code from a downloaded file; re-save it as a plain state dict of tensors "
                "(torch.save(model.state_dict(), path)) where you trust it"
            ) from error
        raise PublishedRefitError(
            f"published refit {path} is unreadable (torch.load(weights_only=True): {type(error).__name__}: "
            f"{torch_reason(error)}): not a torch.save file of tensors, or cut short; delete it and fetch it again"
        ) from error
    if isinstance(loaded, Mapping) and isinstance(loaded.get("model_state_dict"), Mapping):
        loaded = loaded["model_state_dict"]
    if not isinstance(loaded, Mapping) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise PublishedRefitError(
            f"published refit {path} holds a {type(loaded).__name__}, not a state dict of tensors (or a dict with one "
            "under 'model_state_dict'); is it a TransformerLens 2 HookedTransformer checkpoint?"
        )
    return without_buffers(loaded)


def without_buffers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parameters of a HookedTransformer state dict: its attention masks, IGNORE and rotary tables dropped."""
    return {name: tensor for name, tensor in state.items() if not name.endswith(BUFFER_SUFFIXES)}


def tl2_shapes(spec: ArchitectureSpec) -> dict[str, tuple[int, ...]]:
    """Every parameter of a TransformerLens 2 HookedTransformer of architecture `spec`, with its shape."""
    n, d, h, dh, dm, v = spec.n_heads, spec.d_model, spec.n_layers, spec.d_head, spec.d_mlp, spec.d_vocab
    shapes: dict[str, tuple[int, ...]] = {"embed.W_E": (v, d), "pos_embed.W_pos": (spec.n_ctx, d)}
    for layer in range(h):
        block = f"blocks.{layer}"
        shapes.update({f"{block}.ln1.w": (d,), f"{block}.ln1.b": (d,)})
        for name in "QKV":
            shapes.update({f"{block}.attn.W_{name}": (n, d, dh), f"{block}.attn.b_{name}": (n, dh)})
        shapes.update({f"{block}.attn.W_O": (n, dh, d), f"{block}.attn.b_O": (d,)})
        if not spec.attn_only:
            shapes.update({f"{block}.ln2.w": (d,), f"{block}.ln2.b": (d,)})
            shapes.update({f"{block}.mlp.W_in": (d, dm), f"{block}.mlp.b_in": (dm,)})
            shapes.update({f"{block}.mlp.W_out": (dm, d), f"{block}.mlp.b_out": (d,)})
    shapes.update({"ln_final.w": (d,), "ln_final.b": (d,), "unembed.W_U": (d, v), "unembed.b_U": (v,)})
    return shapes


def _check_shapes(state: Mapping[str, torch.Tensor], spec: ArchitectureSpec, path: Path) -> None:
    found = {name: tuple(tensor.shape) for name, tensor in state.items()}
    mismatch = shape_mismatch(tl2_shapes(spec), found, spec.name)
    if mismatch:
        raise PublishedRefitError(
            f"published refit {path} does not fit architecture '{spec.name}' ({mismatch}); check the "
            f"architecture's entry (n_layers, n_heads, d_model, d_head, d_mlp, n_ctx, d_vocab, attn_only) or its refit_file"
        )


def convert_tl2_state_dict(
    state: Mapping[str, torch.Tensor], spec: ArchitectureSpec, path: str | Path = "<state dict>"
) -> dict[str, torch.Tensor]:
    """A HookedTransformer state dict as our checkpoint's (TransformerBridge) state dict; values unchanged.

    Buffers are dropped. Raises PublishedRefitError naming `path` when a tensor is missing, unexpected or of
    the wrong shape.
    """
    state = without_buffers(state)
    _check_shapes(state, spec, Path(path))
    n, dh, d = spec.n_heads, spec.d_head, spec.d_model
    out = {
        "embed.weight": state["embed.W_E"],
        "pos_embed.weight": state["pos_embed.W_pos"],
        "ln_final.weight": state["ln_final.w"],
        "ln_final.bias": state["ln_final.b"],
        "unembed.weight": state["unembed.W_U"].T,
        "unembed.bias": state["unembed.b_U"],
    }
    for layer in range(spec.n_layers):
        tl2, ours = f"blocks.{layer}", f"blocks.{layer}"
        for norm in ("ln1",) + (() if spec.attn_only else ("ln2",)):
            out[f"{ours}.{norm}.weight"] = state[f"{tl2}.{norm}.w"]
            out[f"{ours}.{norm}.bias"] = state[f"{tl2}.{norm}.b"]
        for name in "QKV":
            # [head, d_model, d_head] -> rows head * d_head + i of an nn.Linear [n_heads * d_head, d_model]
            out[f"{ours}.attn.{name.lower()}.weight"] = (
                state[f"{tl2}.attn.W_{name}"].permute(0, 2, 1).reshape(n * dh, d)
            )
            out[f"{ours}.attn.{name.lower()}.bias"] = state[f"{tl2}.attn.b_{name}"].reshape(n * dh)
        out[f"{ours}.attn.o.weight"] = state[f"{tl2}.attn.W_O"].reshape(n * dh, d).T
        out[f"{ours}.attn.o.bias"] = state[f"{tl2}.attn.b_O"]
        if not spec.attn_only:
            out[f"{ours}.mlp.in.weight"] = state[f"{tl2}.mlp.W_in"].T
            out[f"{ours}.mlp.in.bias"] = state[f"{tl2}.mlp.b_in"]
            out[f"{ours}.mlp.out.weight"] = state[f"{tl2}.mlp.W_out"].T
            out[f"{ours}.mlp.out.bias"] = state[f"{tl2}.mlp.b_out"]
    return {name: tensor.detach().contiguous().clone() for name, tensor in out.items()}


def download_published_refit(source: CheckpointSource, spec: ArchitectureSpec, seed: int, directory: Path) -> Path:
    """source published: the refit's file from the hub repository, downloaded into `directory` (not the hub cache)."""
    from huggingface_hub import hf_hub_download

    filename = source.file_in_repository(spec, seed)
    return Path(
        hf_hub_download(source.repo_id, filename, revision=source.revision, local_dir=directory, repo_type="model")
    )


def convert_published_refit(
    original: str | Path,
    spec: ArchitectureSpec,
    seed: int,
    source: CheckpointSource,
    out_dir: str | Path,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Convert one published refit file into `out_dir`/final.pt + meta.json (written last); returns the meta.

    meta.json records the source, the original file's sha256, the conversion and the refit's identity,
    and `final_weights_sha256`, which every later load checks (headstab.refits.models.load_verified_state_dict).
    """
    original, out_dir = Path(original), Path(out_dir)
    original_sha256 = sha256_file(original)
    converted = convert_tl2_state_dict(load_tl2_state_dict(original), spec, original)
    weights = out_dir / "final.pt"
    save_torch_atomic(converted, weights)
    in_repository = source.file_in_repository(spec, seed)
    where = f"{source.repo_id}@{source.revision}" if source.kind == PUBLISHED else str(source.path)
    meta = {
        "architecture": spec.to_dict(),
        "seed": int(seed),
        "source": source.to_dict(),
        "identity": f"{where}:{in_repository}",
        "original_file": in_repository,
        "original_sha256": original_sha256,
        "conversion": CONVERSION,
        "final_weights_sha256": sha256_file(weights),
        "environment": dict(environment or {}),
    }
    write_json_atomic(out_dir / "meta.json", meta)
    return meta
