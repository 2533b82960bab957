"""One refit of a training job: the corpus it shares, its data order and resume, its outputs and its stop message.

Every refit of a job keeps what a refit trained alone has: its initialisation and data order (from its
seeds), its optimiser state, its own full states, snapshots, `final.pt`, `meta.json` and `train_log.csv`
in its own directory, and its own divergence stop.
"""

from __future__ import annotations

import csv
import logging
import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from headstab.data.shards import corpus_content_sha256, read_corpus_meta
from headstab.fileio import atomic_path, save_torch_atomic, sha256_file, write_json_atomic
from headstab.plan.seed_design import training_seeds, ulp_perturbed
from headstab.plan.spec import ArchitectureSpec
from headstab.refits.models import WEIGHT_MATRIX_KEY
from headstab.refits.tokenizer import tokenizer_identity
from headstab.training.checkpoint import (
    load_latest_state,
    prune_states,
    resume_identity,
    upgraded_identity,
    why_not_resumable,
)
from headstab.training.data import TokenWindows, check_training_vocabulary, training_steps, window_order
from headstab.training.errors import TrainingError
from headstab.training.initial_weights import initial_state_dict
from headstab.training.options import RefitTarget, TrainingData, TrainingOptions
from headstab.training.perturbation import ULP, nudge_weights_one_ulp
from headstab.training.snapshots import missing_snapshots, trained_snapshot_steps
from headstab.training.stack import RefitState

log = logging.getLogger("headstab.training")  # the package's one logger name, as docs/operations.md quotes it

LOG_COLUMNS = ("step", "tokens", "loss", "lr", "seconds")


@dataclass(frozen=True)
class Corpus:
    """What every refit of a job trains on, checked once: the windows, the step budget, the identities."""

    data: TokenWindows
    steps: int
    record: dict[str, Any]  # meta.json's "corpus": name, meta path and sha256, shards
    tokenizer: dict[str, Any] | None  # tokenizer_identity, None when no tokenizer_dir is given
    sha256: str | None  # of the corpus's content (corpus_content_sha256): part of every refit's identity
    meta_sha256: str | None = None  # of the corpus meta.json file, as states written by older code identify it


def open_corpus(spec: ArchitectureSpec, data: TrainingData) -> Corpus:
    """Open and check the inputs: tokenizer size, shards, step budget, snapshot steps, corpus identity."""
    shards = data.shard_paths
    corpus_label = f"'{spec.corpus}' ({data.corpus_meta_path or ', '.join(map(str, shards))})"
    tokenizer_info = None
    if data.tokenizer_dir is not None:
        tokenizer_info = tokenizer_identity(data.tokenizer_dir)
    windows = TokenWindows.open(shards, spec.seq_len)
    tokenizer_size = tokenizer_info["vocab_size"] if tokenizer_info else None
    check_training_vocabulary(spec, tokenizer_size, windows.max_token_id(), str(data.tokenizer_dir), corpus_label)
    steps = training_steps(spec, windows.n_windows, corpus_label)
    if spec.snapshot_steps and spec.snapshot_steps[-1] > steps:
        raise TrainingError(
            f"architecture '{spec.name}': snapshot step {spec.snapshot_steps[-1]} is beyond its {steps} training steps; "
            f"lower architectures.{spec.name}.snapshot_steps (or architecture_defaults.snapshot_steps)"
        )
    meta = data.corpus_meta_path
    if meta is not None and not meta.is_file():
        raise TrainingError(
            f"corpus metadata {meta} does not exist; build it with `snakemake {shlex.quote(str(meta))}` (rule corpus_meta)"
        )
    meta_sha256 = sha256_file(meta) if meta else None
    record = {
        "name": spec.corpus,
        "meta": str(meta) if meta else None,
        "meta_sha256": meta_sha256,
        "shards": [str(p) for p in shards],
    }
    content = corpus_content_sha256(read_corpus_meta(meta)) if meta else None
    return Corpus(windows, steps, record, tokenizer_info, content, meta_sha256)


@dataclass
class Position:
    """How far a refit has trained and what it resumes from: restored from a full state, advanced by the steps."""

    step: int = 0
    log_rows: list[list[Any]] = field(default_factory=list)
    row_losses: list[float] = field(default_factory=list)  # step losses since the last log row
    seconds_before: float = 0.0  # training seconds of earlier sessions
    clock: float = 0.0  # perf_counter when this session's steps of the refit began
    resumed_from: Path | None = None
    restarted_because: str | None = None
    last_good: Path | None = None  # the newest full state on disk: what a divergence stop keeps
    state: RefitState | None = None  # weights and optimiser state, while the refit is outside a stack

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.clock


@dataclass(eq=False)  # compared by identity: a stack tells its refits apart
class Refit:
    """One refit of the job: what it trains on and in which order, where its files go, how far it is."""

    spec: ArchitectureSpec
    name: int | str  # as the spec lists it: 7, or "1-2" for a seed grid's init-data pair
    init_seed: int
    data_seed: int
    out_dir: Path
    order: np.ndarray  # [steps * batch_size] window ids, in training order
    identity: dict[str, Any]  # resume_identity: a full state continues this refit only if it matches
    position: Position
    error: TrainingError | None = None  # why it stopped (a divergence), None while it trains or once done

    @property
    def label(self) -> str:
        return f"{self.spec.name} seed {self.name}"

    def window_ids(self, step: int) -> np.ndarray:
        """The windows of training step `step` (1-based)."""
        batch = self.spec.batch_size
        return self.order[(step - 1) * batch : step * batch]


def prepare_refit(spec: ArchitectureSpec, corpus: Corpus, target: RefitTarget, precision: str) -> Refit:
    """The refit `target` at its newest verified full state of this configuration, else at step 0."""
    out_dir = Path(target.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(".*.tmp"):  # left by a job killed mid-write
        stale.unlink()
    init_seed, data_seed = training_seeds(target.name, spec.data_order)
    order = window_order(corpus.data.n_windows, data_seed, corpus.steps * spec.batch_size)
    identity = resume_identity(spec, init_seed, data_seed, corpus.sha256, precision)
    if ulp_perturbed(target.name):  # a grid cell's twin: its own identity, so no state of its cell resumes it
        identity["init_perturbation"] = ULP
    refit = Refit(spec, target.name, init_seed, data_seed, out_dir, order, identity, Position())
    refit.position = _resume(refit, corpus)
    write_log(refit.out_dir / "train_log.csv", refit.position.log_rows)  # drops rows logged after the state
    return refit


def _resume(refit: Refit, corpus: Corpus) -> Position:
    """The refit's position in its newest verified full state; stale states are deleted (restart from step 0)."""
    steps = corpus.steps
    state, path = load_latest_state(refit.out_dir)
    if state is not None:
        state["identity"] = upgraded_identity(state["identity"], corpus.meta_sha256, corpus.sha256)
    reason = why_not_resumable(state, refit.identity, steps) if state is not None else None
    if state is not None and not reason:
        missing = missing_snapshots(refit.out_dir, trained_snapshot_steps(refit.spec), state["step"])
        reason = f"its run did not keep the snapshots of steps {missing}" if missing else None
    if reason or state is None:
        fresh = RefitState(initial_weights(refit))
    if reason:
        log.warning(
            "checkpoint %s cannot be resumed (%s); %s restarts from step 0 and deletes the stale %s/state_*.pt",
            path,
            reason,
            refit.label,
            refit.out_dir,
        )
        # Their configuration no longer exists: deleted so that no later rerun can pick them up.
        prune_states(refit.out_dir, keep=0)
        return Position(restarted_because=f"{path.name} {reason}", state=fresh)
    if state is None:
        return Position(state=fresh)
    log.info("resuming %s from %s (step %d of %d)", refit.label, path, state["step"], steps)
    return Position(
        step=state["step"],
        log_rows=state["log_rows"],
        row_losses=state["row_losses"],
        seconds_before=state["seconds"],
        resumed_from=path,
        last_good=path,
        state=RefitState(state["model"], state["optimizer"]),
    )


def initial_weights(refit: Refit) -> dict[str, torch.Tensor]:
    """The refit's weights at step 0: its init seed's, moved one ulp for a grid cell's one-ulp twin."""
    weights = initial_state_dict(refit.spec, refit.init_seed)
    if refit.identity.get("init_perturbation") == ULP:
        moved = nudge_weights_one_ulp(weights)
        log.info("initial weights of %s: %d elements moved one ulp", refit.label, moved)
    return weights


def full_state(refit: Refit, state: RefitState) -> dict[str, Any]:
    """The refit's full state after its current step, as `save_state` writes it."""
    position, step = refit.position, refit.position.step
    return {
        "step": step,
        "windows_consumed": step * refit.spec.batch_size,
        "model": state.weights,
        "optimizer": state.moments,
        "log_rows": position.log_rows,
        "row_losses": position.row_losses,
        "seconds": position.seconds(),
        "identity": refit.identity,
    }


def snapshot_record(refit: Refit, corpus: Corpus) -> dict[str, Any]:
    """meta.json of the snapshot of the refit's weights after its current step (headstab.training.snapshots)."""
    spec, step = refit.spec, refit.position.step
    return {
        "source": "training",
        "architecture": spec.to_dict(),
        "seed": refit.init_seed,
        "step": step,
        "tokens_trained": step * spec.tokens_per_step,
        "steps": corpus.steps,
        "corpus": corpus.record,
    }


def append_log_row(refit: Refit) -> None:
    """Log the mean loss since the previous row (train_log.csv), and start the next row."""
    spec, position = refit.spec, refit.position
    row = [
        position.step,
        position.step * spec.tokens_per_step,
        f"{np.mean(position.row_losses):.6f}",
        f"{spec.lr:g}",
        f"{position.seconds():.2f}",
    ]
    with open(refit.out_dir / "train_log.csv", "a", newline="") as handle:
        csv.writer(handle).writerow(row)
    position.log_rows.append(row)
    position.row_losses = []


def write_log(path: Path, rows: list[list[Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(LOG_COLUMNS)
        writer.writerows(rows)


def stop_message(refit: Refit, what: str) -> str:
    """The message of a divergence stop: what happened, what is kept, and the keys to change."""
    spec, last_good = refit.spec, refit.position.last_good
    kept = (
        f"The last full-state checkpoint before it, {last_good}, is kept"
        if last_good
        else "No full-state checkpoint was written"
    )
    why = " because the checkpoints were written with another lr" if last_good else ""
    return (
        f"{refit.label}: {what}; training stopped. {kept} and final.pt was not written. Lower the "
        f"learning rate: set `architectures.{spec.name}.lr` to {spec.lr / 10:g} (lr / 10) and rerun; training "
        f"restarts from step 0{why} (lower the lr again if it diverges again)."
    )


def divergence_threshold(spec: ArchitectureSpec) -> float:
    """The loss above which a refit has diverged: divergence_factor x ln(d_vocab), the loss of a uniform guess."""
    return spec.divergence_factor * math.log(spec.d_vocab)


def write_outputs(refit: Refit, corpus: Corpus, options: TrainingOptions, job: dict[str, Any]) -> dict[str, Any]:
    """Weights first, then meta.json, the record that says they are complete; returns its content.

    job: what meta.json records of the job beyond this refit (session seconds, the refits trained together).
    """
    spec, position, weights = refit.spec, refit.position, refit.position.state.weights
    missing = missing_snapshots(refit.out_dir, trained_snapshot_steps(spec), corpus.steps)
    if missing:  # a snapshot deleted or damaged after it was written: only a retraining restores it
        raise TrainingError(
            f"{refit.label}: the snapshots of steps {missing} in {refit.out_dir / 'snapshots'} are missing or fail "
            f"their sha256; delete {refit.out_dir}/state_*.pt and rerun, which retrains from step 0"
        )
    save_torch_atomic(weights, refit.out_dir / "final.pt")
    meta = {
        "architecture": spec.to_dict(),
        "seed": refit.name,
        "init_seed": refit.init_seed,
        "data_seed": refit.data_seed,
        **({"init_perturbation": ULP} if "init_perturbation" in refit.identity else {}),
        "steps": corpus.steps,
        "tokens_trained": corpus.steps * spec.tokens_per_step,
        "windows_available": corpus.data.n_windows,
        "final_loss": float(position.log_rows[-1][2]) if position.log_rows else None,
        "weight_matrix_params": sum(t.numel() for name, t in weights.items() if WEIGHT_MATRIX_KEY.match(name)),
        "corpus": corpus.record,
        "tokenizer": corpus.tokenizer,
        "data_order": "np.random.default_rng(data_seed).permutation of all windows, one per epoch",
        "training": options.record(),
        "identity": refit.identity,
        "resumed_from": str(position.resumed_from) if position.resumed_from else None,
        "restarted_because": position.restarted_because,
        "training_seconds": round(position.seconds_before if position.clock == 0 else position.seconds(), 3),
        **job,
        "threads": torch.get_num_threads(),
        "final_weights_sha256": sha256_file(refit.out_dir / "final.pt"),
    }
    write_json_atomic(refit.out_dir / "meta.json", meta)
    prune_states(refit.out_dir, keep=1)  # the newest full state (of the last step) stays, to continue training later
    log.info("finished %s: final loss %s after %.1f s", refit.label, meta["final_loss"], meta["training_seconds"])
    return meta
