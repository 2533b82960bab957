"""Seeded families from the hub (headstab.plan.hub_families): fetch one seed's model, and load it as a TransformerBridge.

A family's refits are not converted to our native GPT-style checkpoint: GPT-NeoX (Pythia) has rotary
positions and parallel attention/MLP, which the native model does not have. Rule fetch_family keeps
each seed's Hugging Face weights as they are, in the refit's checkpoint directory:

    {arch}/checkpoints/seed{s}/final.pt      the model's state dict (Hugging Face names), float32
    {arch}/checkpoints/seed{s}/config.json   its Hugging Face config
    {arch}/checkpoints/seed{s}/tokenizer*    its tokenizer (same vocabulary as the configured one: checked)
    {arch}/checkpoints/seed{s}/meta.json     source, identity, loader "transformers", sha256 of final.pt

and `load_family_model` (called by headstab.refits.models.load_trained_model when meta.json says loader
"transformers") rebuilds it with `AutoModelForCausalLM.from_config`, loads the weights and wraps it with
`TransformerBridge.boot_transformers(..., hf_model=...)`, offline. Every analysis then reads the
TransformerLens hooks as for our own refits (`blocks.{l}.attn.hook_pattern`, `hook_z`, ...), and the
bridge's state dict has our names (`blocks.{l}.attn.q.weight`, `attn.o.weight`, `mlp.in.weight`, ...),
so weight norms and activation norms read it unchanged. A model without `hook_resid_mid` (GPT-NeoX's
parallel attention) has its `hook_resid_post` cached instead, as for attention-only models.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from headstab.fileio import save_torch_atomic, sha256_file, torch_reason, weights_only_refusal, write_json_atomic
from headstab.plan.hub_families import (
    DIMENSIONS,
    FamilyModel,
    FamilySource,
    hf_dimensions,
    remote_code,
)
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.tokenizer import load_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from transformer_lens.model_bridge import TransformerBridge

LOADER = "transformers"
WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin")
PICKLED_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth")  # read with torch.load; safetensors holds no pickle
# What a hub download needs of a model repository: config, weights, tokenizer (no optimizer states etc.).
DOWNLOAD_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]


class FamilyModelError(ValueError):
    """A family's model cannot be loaded or does not fit its architecture entry; the message names it."""


def download_family_model(model: FamilyModel, directory: Path) -> Path:
    """A hub model's files (config, weights, tokenizer) at its revision, into `directory` (not the hub cache)."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            model.id, revision=model.revision, local_dir=directory, allow_patterns=DOWNLOAD_PATTERNS, repo_type="model"
        )
    )


def check_dimensions(hf_config: Mapping[str, Any], spec: ArchitectureSpec, where: str) -> None:
    """The model's config.json against the architecture's entry; FamilyModelError naming the first difference."""
    found = hf_dimensions(dict(hf_config))
    wrong = [key for key in DIMENSIONS if found[key] != getattr(spec, key)]
    if wrong:
        details = ", ".join(f"{key} {found[key]} (entry: {getattr(spec, key)})" for key in wrong)
        raise FamilyModelError(
            f"model {where} does not fit architecture '{spec.name}': its config.json has {details}; correct the "
            f"entry architectures.{spec.name} (or remove the keys to read them from a local model's config.json)"
        )


def _check_tokenizer(tokenizer: Any, configured_dir: str | Path, where: str) -> None:

    configured = load_tokenizer(configured_dir)
    if tokenizer.get_vocab() != configured.get_vocab():
        raise FamilyModelError(
            f"model {where} has its own tokenizer ({len(tokenizer)} ids), which differs from the configured tokenizer "
            f"in {configured_dir} ({len(configured)} ids); point the architecture's tokenizer at the family's own "
            "(a tokenizers entry with source hub and the model's id, or source local and its directory)"
        )


def _refused_weights(error: BaseException, model_dir: Path, where: str) -> FamilyModelError:
    """The error for pickled weights in `model_dir` that torch.load(weights_only=True) would not read, naming them."""
    pickled = ", ".join(str(p) for p in sorted(model_dir.iterdir()) if p.suffix in PICKLED_WEIGHT_SUFFIXES)
    refused = weights_only_refusal(error)
    if refused is None:
        return FamilyModelError(
            f"{where}: its weights {pickled} are unreadable (torch.load(weights_only=True): {torch_reason(error)}); "
            "delete them and fetch the model again, or use its .safetensors weights"
        )
    return FamilyModelError(
        f"{where}: its weights {pickled} need code to be unpickled (they refer to {refused}), and torch refused "
        "them before running anything. headstab never unpickles code from a downloaded file: use the model's "
        ".safetensors weights, or re-save them as a plain state dict of tensors where you trust them"
    )


def load_hf_model(model_dir: str | Path, where: str) -> Any:
    """The causal LM saved in `model_dir` (float32, eager attention), never running code of its own: a config
    with an `auto_map` is refused, trust_remote_code=False, pickled weights read with weights_only=True.
    FamilyModelError naming `where` (the model, its seed and family) otherwise."""
    from transformers import AutoModelForCausalLM

    model_dir = Path(model_dir)
    reason = remote_code(model_dir)  # a hub download is first seen here; a local path may have changed
    if reason is not None:
        raise FamilyModelError(f"{where}: {reason}")
    try:
        return AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="eager", trust_remote_code=False
        )
    except pickle.UnpicklingError as error:  # transformers reads .bin weights with torch.load(weights_only=True)
        raise _refused_weights(error, model_dir, where) from error
    except (OSError, ValueError) as error:
        raise FamilyModelError(f"{where} cannot be loaded with transformers from {model_dir}: {error}") from error


def save_family_refit(
    model_dir: str | Path,
    spec: ArchitectureSpec,
    seed: int,
    source: FamilySource,
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One seed's model from `model_dir` (save_pretrained layout) into `out_dir`; meta.json written last.

    Checks the config's dimensions against `spec` and the tokenizer against the configured one
    (`tokenizer_dir`). Returns the meta.
    """
    from transformers import AutoTokenizer

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    model_entry = source.model(seed)
    where = f"model {model_entry.identity} (seed {seed} of '{spec.name}')"
    model = load_hf_model(model_dir, where)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise FamilyModelError(f"{where} cannot be loaded with transformers from {model_dir}: {error}") from error
    check_dimensions(model.config.to_dict(), spec, model_entry.identity)
    _check_tokenizer(tokenizer, tokenizer_dir, model_entry.identity)
    weights = out_dir / "final.pt"
    save_torch_atomic({name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}, weights)
    model.config.to_json_file(out_dir / "config.json")
    tokenizer.save_pretrained(out_dir)
    originals = sorted(p for p in model_dir.iterdir() if p.name.endswith(WEIGHT_FILE_SUFFIXES))
    meta = {
        "architecture": spec.to_dict(),
        "seed": int(seed),
        "source": {"kind": source.kind, **{k: v for k, v in vars(model_entry).items() if v is not None}},
        "identity": model_entry.identity,
        "loader": LOADER,
        "hf_model_type": model.config.model_type,
        "original_sha256": {p.name: sha256_file(p) for p in originals},
        "final_weights_sha256": sha256_file(weights),
        "environment": dict(environment or {}),
    }
    write_json_atomic(out_dir / "meta.json", meta)
    return meta


def fetch_family_refit(
    source: FamilySource,
    spec: ArchitectureSpec,
    seed: int,
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Rule fetch_family: seed `seed`'s model from its local path, or downloaded beside `out_dir` and deleted."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = source.model(seed)
    if model.directory is not None:
        return save_family_refit(model.directory, spec, seed, source, tokenizer_dir, out_dir, environment)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".download_") as download_dir:
        local = download_family_model(model, Path(download_dir))
        return save_family_refit(local, spec, seed, source, tokenizer_dir, out_dir, environment)


def load_family_model(
    weights_path: str | Path,
    state: Mapping[str, torch.Tensor],
    device: str | torch.device = "cpu",
    tokenizer: Any = None,
) -> TransformerBridge:
    """A family refit saved by fetch_family (`state`: its final.pt, already checked) as a TransformerBridge.

    Rebuilt offline from the config.json beside `weights_path`; the tokenizer is the one saved there
    unless `tokenizer` is given. In eval mode, on `device`.
    """
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    directory = Path(weights_path).parent
    config = AutoConfig.from_pretrained(directory, trust_remote_code=False)
    hf_logging.set_verbosity_error()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    result = model.load_state_dict(dict(state), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise FamilyModelError(
            f"weights file {weights_path} does not fit its config.json ({config.model_type}): missing "
            f"{result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]}; delete the refit's checkpoint "
            "directory and fetch it again (rule fetch_family)"
        )
    model.to(device).eval()
    bridge = TransformerBridge.boot_transformers(
        str(directory), hf_model=model, tokenizer=tokenizer, device=device, trust_remote_code=False
    )
    bridge.eval()
    return bridge
