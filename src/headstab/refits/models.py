"""Models: build, count, save and load the paper's transformers with TransformerLens 4.

Every refit is a `TransformerBridge` around TransformerLens's native GPT-style model
(`TransformerBridge.boot_native`), so later stages read activations by their TransformerLens hook
names (`blocks.{layer}.attn.hook_pattern`, ...). Weights are saved as the bridge's state dict, whose
keys are TransformerLens names (`embed.weight`, `blocks.{layer}.attn.q.weight`, `unembed.weight`).

transformer_lens takes seconds to import, so it is imported inside the functions that need it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from headstab.fileio import save_torch_atomic, sha256_file
from headstab.plan.layout import writer_rule
from headstab.plan.spec import ArchitectureSpec, ConfigError
from headstab.refits.hub_models import load_family_model
from headstab.refits.weight_processing import process_weights

if TYPE_CHECKING:  # pragma: no cover
    from transformer_lens.model_bridge import TransformerBridge

log = logging.getLogger(__name__)

# Attention W_Q, W_K, W_V, W_O and MLP W_in, W_out: the matrices the listings' n_params counts.
WEIGHT_MATRIX_KEY = re.compile(r"^blocks\.\d+\.(attn\.[qkvo]|mlp\.(in|out))\.weight$")
# Output projections that write into the residual stream.
RESIDUAL_OUTPUT_KEY = re.compile(r"^blocks\.\d+\.(attn\.o|mlp\.out)\.weight$")


class CheckpointError(RuntimeError):
    """A weights file is missing, unreadable or does not fit the architecture; the message says how to rebuild it."""


def rebuild_command(weights_path: str | Path) -> str:
    """The shell command that rebuilds the weights `weights_path` (by the rule `weights_rule` names)."""
    quoted = shlex.quote(str(weights_path))
    return f"rm -f {quoted} && snakemake --cores all {quoted}"


def weights_rule(weights_path: str | Path) -> str:
    """The rule that wrote the weights `weights_path`: init_weights or snapshot_weights for a snapshot's,
    else by its meta.json: fetch_published (a published refit), fetch_family (a hub family's),
    reuse_paper_refit (a seed grid's copy of a paper refit) or train; without a readable meta.json
    'train' with the fetching rules named beside it."""

    weights_path = Path(weights_path)
    rule = writer_rule(weights_path)
    if rule in ("init_weights", "snapshot_weights"):
        return rule
    try:
        meta = json.loads((weights_path.parent / "meta.json").read_text())
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict):
        return "train, or fetch_published / fetch_family where the architecture's source is published / hub_family"
    source = meta.get("source")
    kind = source.get("kind") if isinstance(source, dict) else None
    if meta.get("reused_paper_refit"):
        return "reuse_paper_refit"
    if kind in ("published", "published_local"):
        return "fetch_published"
    if kind == "hub_family" or meta.get("loader") == "transformers":
        return "fetch_family"
    return "train"


def _rebuild_hint(weights_path: Path) -> str:
    return (
        f"delete it and rebuild it with `{rebuild_command(weights_path)}` (rule {weights_rule(weights_path)}; "
        "add --configfile for a non-default configuration)"
    )


def recorded_sha256(weights_path: Path) -> str | None:
    """`final_weights_sha256` of the meta.json beside a final.pt (None: no meta.json, or it records none)."""
    meta_path = weights_path.parent / "meta.json"
    if weights_path.name != "final.pt" or not meta_path.is_file():
        return None
    try:
        return json.loads(meta_path.read_text()).get("final_weights_sha256")
    except (json.JSONDecodeError, AttributeError) as err:
        raise CheckpointError(
            f"training metadata {meta_path} beside {weights_path} is not a valid JSON record ({err}); "
            + _rebuild_hint(weights_path)
        ) from err


def recorded_loader(weights_path: Path) -> str | None:
    """`loader` of the meta.json beside a final.pt: "transformers" for a hub family's refit, else None."""
    meta_path = weights_path.parent / "meta.json"
    if weights_path.name != "final.pt" or not meta_path.is_file():
        return None
    try:
        return json.loads(meta_path.read_text()).get("loader")
    except (json.JSONDecodeError, AttributeError):
        return None  # recorded_sha256 has reported it


def load_verified_state_dict(weights_path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict saved at `weights_path`, checked against the sha256 its meta.json records first.

    torch.load with weights_only=True (nothing unpickled beyond tensors). Raises CheckpointError naming
    the file and the rebuild command when it is missing, corrupt (sha256 differs), unreadable or not a
    state dict.
    """
    weights_path = Path(weights_path)
    if not weights_path.is_file():
        raise CheckpointError(f"weights file {weights_path} does not exist; {_rebuild_hint(weights_path)}")
    expected = recorded_sha256(weights_path)
    if expected is not None:
        found = sha256_file(weights_path)
        if found != expected:
            raise CheckpointError(
                f"weights file {weights_path} is corrupt: its sha256 is {found}, but {weights_path.parent / 'meta.json'} "
                f"records {expected}; {_rebuild_hint(weights_path)}"
            )
    try:
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise CheckpointError(
            f"weights file {weights_path} is unreadable ({type(err).__name__}: {err}); {_rebuild_hint(weights_path)}"
        ) from err
    if not isinstance(state, dict):
        raise CheckpointError(
            f"weights file {weights_path} holds a {type(state).__name__}, not a state dict; {_rebuild_hint(weights_path)}"
        )
    return state


def resolve_device(device: str) -> torch.device:
    """The torch device of config key `compute.device`: `auto` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"config key 'compute.device' is '{device}' but no CUDA device is visible; use auto or cpu")
    return torch.device(device)


def build_model(
    spec: ArchitectureSpec,
    seed: int,
    tokenizer: Any = None,
    device: str | torch.device = "cpu",
    legacy_gpt2_init: bool = True,
) -> TransformerBridge:
    """A freshly initialised model of architecture `spec`; the same seed gives bit-identical weights.

    TransformerLens 4's native `gpt2` init scales the residual output projections (W_O, W_out) by
    1/sqrt(2 n_layers), which the TransformerLens HookedTransformer the paper trained with did not do
    (every weight matrix ~ N(0, initializer_range)). `legacy_gpt2_init` (default) undoes that scale so
    the refits start from the paper's distribution.
    """
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(TransformerBridgeConfig(**spec.model_config(seed)), tokenizer=tokenizer)
    if legacy_gpt2_init and spec.init_mode == "gpt2":
        # Deterministic rescale of already-seeded N(0, std / sqrt(2 n_layers)) draws to N(0, std).
        scale = math.sqrt(2 * spec.n_layers)
        with torch.no_grad():
            for name, tensor in model.state_dict(keep_vars=True).items():
                if RESIDUAL_OUTPUT_KEY.match(name):
                    tensor.mul_(scale)
    return _to_device(model, device)


def _to_device(model: TransformerBridge, device: str | torch.device) -> TransformerBridge:
    # The bridge prints a line on every .to(); skip the no-op move to the CPU it was built on.
    if torch.device(device) != next(model.parameters()).device:
        model.to(device)
    return model


def count_weight_matrix_params(model: TransformerBridge) -> int:
    """Parameters in the attention (W_Q, W_K, W_V, W_O) and MLP (W_in, W_out) weight matrices.

    Biases, LayerNorms and embeddings are not counted (the listings' n_params). Measured from the
    model's own tensors, not from the architecture formula.
    """
    return sum(t.numel() for name, t in model.state_dict().items() if WEIGHT_MATRIX_KEY.match(name))


def save_weights(model: TransformerBridge, path: str | Path) -> None:
    """Save the model's state dict (TransformerLens names) atomically: temporary file, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    save_torch_atomic(state, path)


def shape_mismatch(expected: Mapping[str, tuple], found: Mapping[str, tuple], architecture: str) -> str | None:
    """How the tensor shapes `found` ({name: shape}) differ from `expected`: the first missing and unexpected
    names (sorted) and the first tensor of the wrong shape; None when they match."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong_shape = sorted(n for n in set(expected) & set(found) if expected[n] != found[n])
    details = []
    if missing:
        details.append(f"missing {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    if unexpected:
        details.append(f"unexpected {unexpected[:3]}{' ...' if len(unexpected) > 3 else ''}")
    if wrong_shape:
        n = wrong_shape[0]
        details.append(f"{n} has shape {found[n]}, architecture '{architecture}' needs {expected[n]}")
    return "; ".join(details) or None


def load_trained_model(
    spec: ArchitectureSpec,
    weights_path: str | Path,
    device: str | torch.device = "cpu",
    tokenizer: Any = None,
    weight_processing: Sequence[str] = (),
) -> TransformerBridge:
    """Model of architecture `spec` with the weights saved at `weights_path` (a `final.pt`), in eval mode.

    The file is checked against the sha256 its meta.json records (load_verified_state_dict).
    weight_processing: TransformerLens 2 steps applied to the saved weights first
    (`headstab.refits.weight_processing`, config key analysis.weight_processing). Raises CheckpointError
    naming the file and how to rebuild it when it is missing, corrupt, unreadable or its tensors do
    not match the architecture. A hub family's refit (meta.json `loader: transformers`) is rebuilt with
    transformers and TransformerBridge.boot_transformers instead (headstab.refits.hub_models).
    """
    weights_path = Path(weights_path)
    state = load_verified_state_dict(weights_path)
    if recorded_loader(weights_path) == "transformers":  # a hub family's refit (headstab.refits.hub_models)
        if weight_processing:
            raise CheckpointError(
                f"weights file {weights_path} is a hub family's model, analysed as published; "
                f"analysis.weight_processing {list(weight_processing)} applies to our checkpoints only"
            )
        return load_family_model(weights_path, state, device, tokenizer)
    # Any seed: every tensor is overwritten by the saved weights.
    model = build_model(spec, seed=0, tokenizer=tokenizer, legacy_gpt2_init=False)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    found = {name: tuple(t.shape) for name, t in state.items() if hasattr(t, "shape")}
    mismatch = shape_mismatch(expected, found, spec.name)
    if mismatch:
        raise CheckpointError(
            f"weights file {weights_path} does not fit architecture '{spec.name}' ({mismatch}); "
            f"was it trained with another configuration? {_rebuild_hint(weights_path)}"
        )
    model.load_state_dict(process_weights(state, spec, weight_processing))
    _to_device(model, device)
    model.eval()
    return model


def initial_model(
    spec: ArchitectureSpec,
    seed: int,
    device: str | torch.device = "cpu",
    tokenizer: Any = None,
    weight_processing: Sequence[str] = (),
) -> TransformerBridge:
    """Model of architecture `spec` at step 0 of seed `seed`, in eval mode, built in memory: what
    `load_trained_model` gives for the weights rule init_weights writes for that seed (the same bits, the same
    weight processing), without the file. The head types' held-out initialisations are built this way."""
    from headstab.training.initial_weights import initial_state_dict

    model = build_model(spec, seed=0, tokenizer=tokenizer, legacy_gpt2_init=False)
    model.load_state_dict(process_weights(initial_state_dict(spec, seed), spec, weight_processing))
    _to_device(model, device)
    model.eval()
    return model
