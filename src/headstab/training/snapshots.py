"""Snapshots: a refit's weights at a training step, for the stability-along-training analysis.

Step 0 is the initialisation, rebuilt from the seed (`initial_state_dict(spec, seed)`, exactly what
`headstab.training.train_refits` starts from, and bit-identical to `build_model(spec, seed)`); rule
`init_weights` writes it without training. A step > 0 is kept by `train_refits` while it trains, in
`{training dir}/snapshots/step{step}/` (not a declared output, like the full-state checkpoints), and rule
`snapshot_weights` publishes it at
`Layout.snapshot_weights(arch, step, seed)`. Every snapshot is a `final.pt` with a `meta.json` beside
it recording `final_weights_sha256`, so `headstab.refits.models.load_verified_state_dict` checks it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from headstab.fileio import atomic_path, save_torch_atomic, sha256_file, write_json_atomic
from headstab.plan.spec import ArchitectureSpec
from headstab.provenance.records import environment_record
from headstab.refits.models import WEIGHT_MATRIX_KEY
from headstab.training.initial_weights import initial_state_dict

__all__ = [
    "SnapshotError",
    "missing_snapshots",
    "publish_snapshot",
    "save_snapshot",
    "staged_snapshot_dir",
    "trained_snapshot_steps",
    "verified_snapshot",
    "write_init_weights",
]


class SnapshotError(RuntimeError):
    """A snapshot is missing or does not verify; the message names the file and how to rebuild it."""


def trained_snapshot_steps(spec: ArchitectureSpec) -> tuple[int, ...]:
    """The snapshot steps train keeps (step 0 comes from rule init_weights, not from training)."""
    return tuple(step for step in spec.snapshot_steps if step > 0)


def staged_snapshot_dir(checkpoint_dir: str | Path, step: int) -> Path:
    """Where training keeps the weights of step `step`: beside its full-state checkpoints."""
    return Path(checkpoint_dir) / "snapshots" / f"step{step}"


def save_snapshot(weights: Mapping[str, Any], directory: str | Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Write `weights` (a TransformerBridge state dict, on the CPU) to `directory`/final.pt, then meta.json
    (`meta` plus the weights' sha256), the record that says the weights are complete; returns the record."""
    directory = Path(directory)
    save_torch_atomic(dict(weights), directory / "final.pt")
    record = {**meta, "final_weights_sha256": sha256_file(directory / "final.pt")}
    write_json_atomic(directory / "meta.json", record)
    return record


def verified_snapshot(directory: str | Path) -> bool:
    """Whether `directory` holds a final.pt whose sha256 its meta.json records."""
    weights, meta = Path(directory) / "final.pt", Path(directory) / "meta.json"
    if not weights.is_file() or not meta.is_file():
        return False
    try:
        expected = json.loads(meta.read_text()).get("final_weights_sha256")
    except (json.JSONDecodeError, AttributeError):
        return False
    return expected is not None and sha256_file(weights) == expected


def missing_snapshots(checkpoint_dir: str | Path, steps: Iterable[int], up_to: int) -> list[int]:
    """The snapshot steps <= `up_to` that have no verified staged snapshot in `checkpoint_dir`."""
    return [
        step for step in steps if 0 < step <= up_to and not verified_snapshot(staged_snapshot_dir(checkpoint_dir, step))
    ]


def write_init_weights(spec: ArchitectureSpec, seed: int, path: str | Path) -> dict[str, Any]:
    """Refit `seed` of `spec` at step 0, the weights training starts from (bit-identical to `build_model(spec,
    seed)`, tested), saved at `path` (a final.pt) with its meta.json; returns the record."""
    path = Path(path)
    if path.name != "final.pt":
        raise ValueError(f"snapshot weights must be named final.pt (its meta.json goes beside it); got {path}")
    weights = initial_state_dict(spec, seed)
    meta = {
        "source": "initialisation",
        "architecture": spec.to_dict(),
        "seed": int(seed),
        "step": 0,
        "tokens_trained": 0,
        "weight_matrix_params": sum(t.numel() for name, t in weights.items() if WEIGHT_MATRIX_KEY.match(name)),
        "built_with": "headstab.training.initial_weights.initial_state_dict(spec, seed): what training starts from",
        "environment": environment_record("cpu"),
    }
    return save_snapshot(weights, path.parent, meta)


def publish_snapshot(
    checkpoint_dir: str | Path,
    step: int,
    path: str | Path,
    arch: str,
    seed: int | str,
    refit_weights: str | Path | None = None,
) -> dict[str, Any]:
    """Copy the snapshot train kept at `step` to `path` (a final.pt; a hard link where the file system
    allows) and its meta.json beside it, after checking the sha256; returns the meta record.

    Raises SnapshotError naming the staged directory and the command that retrains the refit when
    it is missing or does not verify (train ran without this step in snapshot_steps, or a copy failed).
    """
    staged = staged_snapshot_dir(checkpoint_dir, step)
    if not verified_snapshot(staged):
        final = shlex.quote(str(refit_weights or Path(checkpoint_dir) / "final.pt"))
        raise SnapshotError(
            f"{arch} seed {seed}: no verified snapshot of step {step} in {staged} (train did not keep it: the refit "
            f"was trained before step {step} was in architectures.{arch}.snapshot_steps, or the file is damaged); "
            f"retrain the refit with `snakemake {final} --forcerun train` (same --configfile/--profile), which "
            "restarts from step 0 and keeps every snapshot step"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        try:
            os.link(staged / "final.pt", tmp)
        except OSError:
            shutil.copyfile(staged / "final.pt", tmp)
    record = json.loads((staged / "meta.json").read_text())
    write_json_atomic(path.parent / "meta.json", record)
    if sha256_file(path) != record["final_weights_sha256"]:
        raise SnapshotError(f"{path}: the copy of {staged / 'final.pt'} does not match its sha256; rerun the job")
    return record
