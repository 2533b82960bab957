"""Full-state checkpoints: save, verify, prune, and decide whether one continues this refit.

`state_{step:08d}.pt` holds one refit's weights (TransformerBridge names), its Adam moments (the training
model's parameter names, one refit's slice), step, data position and log rows; its `.sha256` sidecar is
written after it, so a state without one is an interrupted write and is skipped. A state is one refit's,
whichever refits it was trained beside: stacks of refits are formed anew on every resume.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from headstab.fileio import save_torch_atomic, sha256_file, write_text_atomic
from headstab.plan.spec import MODEL_AND_DATA_FIELDS, ArchitectureSpec

log = logging.getLogger("headstab.training")  # the package's one logger name, as docs/operations.md quotes it

# Bump whenever the loop's numerics change (loss, optimiser step, data order, init): older full states then restart.
# 2: the plain training model (headstab.training.model) instead of the TransformerBridge.
TRAINING_CODE_VERSION = 2
# Spec fields that determine the weights at a given step; a full state written under other values is not resumed.
# The lr is constant (no schedule) and Adam's betas/eps are torch's defaults, so lr alone sets each step's update.
# n_tokens, epochs, divergence_factor and the logging/checkpoint cadence only change where the run stops or
# what it writes (window_order of a longer run extends a shorter one's).
TRAJECTORY_FIELDS = (
    *MODEL_AND_DATA_FIELDS,
    "optimizer",
    "lr",
    "weight_decay",
    "batch_size",
    "seq_len",
)


def state_path(out_dir: Path, step: int) -> Path:
    return out_dir / f"state_{step:08d}.pt"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def save_state(out_dir: Path, state: dict[str, Any], keep: int) -> Path:
    """Write a full-state checkpoint (tmp + rename, then its sha256 sidecar) and prune all but the newest `keep`."""
    path = state_path(out_dir, state["step"])
    save_torch_atomic(state, path)
    # The sidecar is written after the rename: a checkpoint without one is treated as unverified and skipped.
    write_text_atomic(_sidecar(path), f"{sha256_file(path)}  {path.name}\n")
    prune_states(out_dir, keep)
    return path


def prune_states(out_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` full-state checkpoints (and their sidecars); keep 0 deletes them all."""
    paths = sorted(out_dir.glob("state_*.pt"))
    for old in paths[: len(paths) - keep]:
        old.unlink(missing_ok=True)
        _sidecar(old).unlink(missing_ok=True)


def load_latest_state(out_dir: Path) -> tuple[dict[str, Any] | None, Path | None]:
    """The newest full-state checkpoint whose sha256 verifies; corrupt or unverifiable ones are logged and skipped."""
    for path in sorted(out_dir.glob("state_*.pt"), reverse=True):
        sidecar = _sidecar(path)
        if not sidecar.is_file():
            log.warning("checkpoint %s has no sha256 sidecar %s (interrupted write?); skipping it", path, sidecar.name)
            continue
        recorded = sidecar.read_text().split()
        expected = recorded[0] if recorded else ""
        found = sha256_file(path)
        if found != expected:
            log.warning(
                "checkpoint %s fails its sha256 check (expected %s, found %s); skipping it", path, expected, found
            )
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=True), path
        except Exception as err:  # verified bytes that still do not load: report and fall back
            log.warning("checkpoint %s cannot be loaded (%s: %s); skipping it", path, type(err).__name__, err)
    return None, None


def resume_identity(
    spec: ArchitectureSpec, seed: int, data_seed: int, corpus_sha256: str | None, precision: str
) -> dict[str, Any]:
    """Everything that determines a refit's weights at a given step, and nothing else (no time, host or path);
    a full state resumes only if it matches.

    seed: the init seed; data_seed: the window order's (recorded only when it differs, as a paper refit's is
    its seed). corpus_sha256: the corpus's content (headstab.data.shards.corpus_content_sha256). precision:
    training.precision (bf16 rounds every matmul's inputs).
    """
    identity = {key: getattr(spec, key) for key in TRAJECTORY_FIELDS}
    identity |= {
        "seed": seed,
        "corpus_sha256": corpus_sha256,
        "training_code_version": TRAINING_CODE_VERSION,
        "precision": precision,
    }
    if data_seed != seed:
        identity["data_seed"] = data_seed
    return identity


def upgraded_identity(saved: dict[str, Any], meta_sha256: str | None, corpus_sha256: str | None) -> dict[str, Any]:
    """A saved identity as `resume_identity` writes it now. States written before identities held the corpus's
    content recorded the sha256 of its meta.json file instead (which held a creation time): such a state is of
    this corpus when that file is the one it was written with (`meta_sha256`, its sha256 now)."""
    if "corpus_meta_sha256" not in saved or "corpus_sha256" in saved:
        return saved
    upgraded = {key: value for key, value in saved.items() if key != "corpus_meta_sha256"}
    upgraded["corpus_sha256"] = corpus_sha256 if saved["corpus_meta_sha256"] == meta_sha256 else "another corpus"
    return upgraded


def why_not_resumable(state: dict[str, Any], identity: dict[str, Any], steps: int) -> str | None:
    """None when `state` continues this refit, else why not, e.g.
    'written with another configuration: lr (checkpoint 0.01, now 0.003)'."""
    saved = state["identity"]
    differing = [
        f"{k} (checkpoint {saved.get(k)!r}, now {identity.get(k)!r})"
        for k in {**identity, **saved}
        if saved.get(k) != identity.get(k)
    ]
    if differing:
        return f"written with another configuration: {', '.join(differing)}"
    if state["step"] > steps:
        return f"at step {state['step']}, beyond the {steps} steps now requested"
    return None
