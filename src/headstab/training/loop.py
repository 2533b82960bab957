"""The training loop of one refit: setup, resume, steps, outputs.

Optimiser: Adam (no weight decay) or AdamW (decoupled decay on every parameter), constant lr; the
loss is TransformerLens's mean next-token cross entropy, in float32.
"""

from __future__ import annotations

import csv
import logging
import math
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from headstab.fileio import atomic_path, sha256_file, write_json_atomic
from headstab.plan.spec import ArchitectureSpec
from headstab.provenance.records import environment_record
from headstab.refits.models import build_model, count_weight_matrix_params, resolve_device, save_weights
from headstab.training.checkpoint import (
    load_latest_state,
    prune_states,
    resume_identity,
    rng_state,
    save_state,
    set_rng_state,
    why_not_resumable,
)
from headstab.training.data import TokenWindows, check_training_vocabulary, training_steps, window_order
from headstab.training.errors import DivergenceError, NonFiniteLossError, TrainingError
from headstab.training.snapshots import missing_snapshots, save_snapshot, staged_snapshot_dir, trained_snapshot_steps

log = logging.getLogger("headstab.training")  # the package's one logger name, as docs/operations.md quotes it

LOG_COLUMNS = ("step", "tokens", "loss", "lr", "seconds")


@dataclass(frozen=True)
class Refit:
    """What is trained, where its files go, and what it trains on."""

    spec: ArchitectureSpec
    seed: int
    out_dir: Path
    device: torch.device
    data: TokenWindows
    steps: int
    order: np.ndarray  # [steps * batch_size] window ids, in training order
    corpus: dict[str, Any]  # meta.json's "corpus" record: name, meta path and sha256, shards
    tokenizer: dict[str, Any] | None  # tokenizer_identity, None when no tokenizer_dir is given
    identity: dict[str, Any]  # resume_identity: a full state continues this refit only if it matches
    # the seed grid's window-order seed and the refit's name "{init}-{data}"; None: both are `seed`.
    data_seed: int | None = None
    name: int | str | None = None


@dataclass
class Position:
    """How far a refit has trained: restored from a full state, advanced by the step loop."""

    step: int = 0
    log_rows: list[list[Any]] = field(default_factory=list)
    row_losses: list[float] = field(default_factory=list)  # step losses since the last log row
    seconds_before: float = 0.0  # training seconds of earlier sessions
    clock: float = 0.0  # perf_counter when this session's steps began
    resumed_from: Path | None = None
    restarted_because: str | None = None
    last_good: Path | None = None  # the newest full state on disk: what a divergence stop keeps

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.clock


def train_refit(
    spec: ArchitectureSpec,
    seed: int,
    shard_paths: Sequence[str | Path],
    out_dir: str | Path,
    corpus_meta_path: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
    device: str = "auto",
    threads: int | None = None,
    keep_checkpoints: int = 2,
    progress: bool = True,
    on_step_end: Callable[[int], None] | None = None,
    data_seed: int | None = None,
    name: int | str | None = None,
) -> dict[str, Any]:
    """Train refit `seed` of `spec` on the token shards; write final.pt, train_log.csv, meta.json into `out_dir`.

    `seed` draws the initial weights and, unless `data_seed` is given, the order of the windows (the paper's
    design); a seed-grid refit (headstab.plan.seed_design) passes its data-order seed and its name "{init}-{data}".

    Resumes from the newest verified `state_*.pt` in `out_dir`. `tokenizer_dir` None skips the
    tokenizer-size check (the shards' token ids are always checked). `on_step_end(step)` is called
    after each step's checkpoint (tests raise in it to simulate a kill). Returns meta.json's content.
    """
    session_start = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(".*.tmp"):  # left by a job killed mid-write
        stale.unlink()
    if threads:
        torch.set_num_threads(threads)
    refit = setup(spec, seed, shard_paths, out_dir, corpus_meta_path, tokenizer_dir, resolve_device(device), data_seed)
    refit = replace(refit, name=name)
    model = build_model(spec, seed, device=refit.device)
    model.train()
    optimizer = make_optimizer(spec, model.parameters())
    position = resume(refit, model, optimizer)
    log.info(
        "training %s seed %d on %s: %d steps x %d x %d tokens = %s tokens (%d windows available), %s, %d weight-matrix "
        "params, %s lr %g wd %g", spec.name, seed, refit.device, refit.steps, spec.batch_size, spec.seq_len,
        f"{refit.steps * spec.tokens_per_step:,}", refit.data.n_windows, f"{torch.get_num_threads()} threads",
        count_weight_matrix_params(model), spec.optimizer, spec.lr, spec.weight_decay,
    )  # fmt: skip
    run_steps(refit, position, model, optimizer, max(1, keep_checkpoints), progress, on_step_end)
    return write_outputs(refit, position, model, session_start)


# ---------------------------------------------------------------- setup
def setup(
    spec: ArchitectureSpec,
    seed: int,
    shard_paths: Sequence[str | Path],
    out_dir: Path,
    corpus_meta_path: str | Path | None,
    tokenizer_dir: str | Path | None,
    device: torch.device,
    data_seed: int | None = None,
) -> Refit:
    """Open and check the inputs: tokenizer size, shards, step budget, data order, corpus identity."""
    corpus_label = f"'{spec.corpus}' ({corpus_meta_path or ', '.join(map(str, shard_paths))})"
    tokenizer_info = None
    if tokenizer_dir is not None:
        from headstab.refits.tokenizer import tokenizer_identity

        tokenizer_info = tokenizer_identity(tokenizer_dir)
    data = TokenWindows.open(shard_paths, spec.seq_len)
    check_training_vocabulary(spec, tokenizer_info["vocab_size"] if tokenizer_info else None, data.max_token_id(),
                     str(tokenizer_dir), corpus_label)  # fmt: skip
    steps = training_steps(spec, data.n_windows, corpus_label)
    if spec.snapshot_steps and spec.snapshot_steps[-1] > steps:
        raise TrainingError(
            f"architecture '{spec.name}': snapshot step {spec.snapshot_steps[-1]} is beyond its {steps} training steps; "
            f"lower architectures.{spec.name}.snapshot_steps (or architecture_defaults.snapshot_steps)"
        )
    order = window_order(data.n_windows, seed if data_seed is None else data_seed, steps * spec.batch_size)
    if corpus_meta_path is not None and not Path(corpus_meta_path).is_file():
        raise TrainingError(
            f"corpus metadata {corpus_meta_path} does not exist; build it with "
            f"`snakemake {shlex.quote(str(corpus_meta_path))}` (rule corpus_meta)"
        )
    corpus_sha256 = sha256_file(corpus_meta_path) if corpus_meta_path else None
    corpus = {"name": spec.corpus, "meta": str(corpus_meta_path) if corpus_meta_path else None,
              "meta_sha256": corpus_sha256, "shards": [str(p) for p in shard_paths]}  # fmt: skip
    identity = resume_identity(spec, seed, corpus_sha256)
    if data_seed is not None and data_seed != seed:  # a paper refit's identity stays as it was: its states resume
        identity["data_seed"] = data_seed
    return Refit(spec, seed, out_dir, device, data, steps, order, corpus, tokenizer_info, identity, data_seed)


def make_optimizer(spec: ArchitectureSpec, parameters: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Adam without weight decay, or AdamW with decoupled decay on all parameters (biases and LayerNorms too, as the paper)."""
    if spec.optimizer == "adam":
        if spec.weight_decay:
            raise TrainingError(
                f"architecture '{spec.name}' sets optimizer adam with weight_decay {spec.weight_decay}; the paper's "
                f"decayed refits use `optimizer: adamw` (set architectures.{spec.name}.optimizer)"
            )
        return torch.optim.Adam(parameters, lr=spec.lr)
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(parameters, lr=spec.lr, weight_decay=spec.weight_decay)
    raise TrainingError(f"architecture '{spec.name}': unknown optimizer '{spec.optimizer}' (adam or adamw)")


# ---------------------------------------------------------------- resume
def resume(refit: Refit, model: Any, optimizer: torch.optim.Optimizer) -> Position:
    """Load the newest verified full state of this refit into model, optimiser and RNGs; delete stale ones."""
    state, path = load_latest_state(refit.out_dir)
    reason = why_not_resumable(state, refit.identity, refit.steps) if state is not None else None
    if state is not None and not reason:
        missing = missing_snapshots(refit.out_dir, trained_snapshot_steps(refit.spec), state["step"])
        reason = f"its run did not keep the snapshots of steps {missing}" if missing else None
    if reason:
        log.warning("checkpoint %s cannot be resumed (%s); %s seed %d restarts from step 0 and deletes the stale "
                    "%s/state_*.pt", path, reason, refit.spec.name, refit.seed, refit.out_dir)  # fmt: skip
        # Their configuration no longer exists: deleted so that no later rerun can pick them up.
        prune_states(refit.out_dir, keep=0)
        return Position(restarted_because=f"{path.name} {reason}")
    if state is None:
        return Position()
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    log.info(
        "resuming %s seed %d from %s (step %d of %d)", refit.spec.name, refit.seed, path, state["step"], refit.steps
    )
    return Position(step=state["step"], log_rows=state["log_rows"], row_losses=state["row_losses"],
                    seconds_before=state["seconds"], resumed_from=path, last_good=path)  # fmt: skip


# ---------------------------------------------------------------- steps
def next_token_loss(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy of `tokens` [batch, pos] (TransformerLens's own loss)."""
    return model(tokens, return_type="loss")


def train_step(model: Any, optimizer: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
    """Forward, backward and one optimiser step on `tokens` [batch, pos]; returns the loss, still on the device."""
    loss = next_token_loss(model, tokens)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


def run_steps(
    refit: Refit,
    position: Position,
    model: Any,
    optimizer: torch.optim.Optimizer,
    keep: int,
    progress: bool,
    on_step_end: Callable[[int], None] | None,
) -> None:
    """Steps position.step + 1 .. refit.steps, with log rows and full states at their cadence."""
    spec = refit.spec
    log_path = refit.out_dir / "train_log.csv"
    _write_log(log_path, position.log_rows)  # drops rows a killed run logged after its last checkpoint
    step_losses: list[torch.Tensor] = []  # on device: no host sync per step
    position.clock = time.perf_counter()
    with open(log_path, "a", newline="") as handle, _progress(progress, refit, position.step) as bar:
        writer = csv.writer(handle)
        for step in range(position.step + 1, refit.steps + 1):
            window_ids = refit.order[(step - 1) * spec.batch_size : step * spec.batch_size]
            tokens = refit.data.batch(window_ids).to(refit.device, non_blocking=True)
            step_losses.append(train_step(model, optimizer, tokens))
            bar.update(1)
            position.step = step
            if step in refit.spec.snapshot_steps:
                _save_snapshot(refit, position, model, step_losses)
            seconds = position.seconds()
            if step % spec.log_every == 0 or step == refit.steps:
                _flush_losses(refit, position, step_losses)
                row = [step, step * spec.tokens_per_step, f"{np.mean(position.row_losses):.6f}", f"{spec.lr:g}",
                       f"{seconds:.2f}"]  # fmt: skip
                writer.writerow(row)
                handle.flush()
                position.log_rows.append(row)
                position.row_losses = []
                bar.set_postfix(loss=row[2], refresh=False)
            if step % spec.checkpoint_every == 0:
                _flush_losses(refit, position, step_losses)
                _check_weights(refit, position, model)
                state = {"step": step, "windows_consumed": step * spec.batch_size, "model": model.state_dict(),
                         "optimizer": optimizer.state_dict(), "rng": rng_state(), "log_rows": position.log_rows,
                         "row_losses": position.row_losses, "seconds": seconds, "identity": refit.identity}  # fmt: skip
                position.last_good = save_state(refit.out_dir, state, keep=keep)
            if on_step_end is not None:
                on_step_end(step)


def _flush_losses(refit: Refit, position: Position, step_losses: list[torch.Tensor]) -> None:
    """Move the steps' losses to the host; stop on the first non-finite or diverged one."""
    spec = refit.spec
    threshold = spec.divergence_factor * math.log(spec.d_vocab)
    values = torch.stack(step_losses).float().cpu().tolist() if step_losses else []
    for offset, value in enumerate(values):
        bad_step = position.step - len(values) + offset + 1
        if not math.isfinite(value):
            raise NonFiniteLossError(_stopped(refit, position, f"loss is {value} at step {bad_step} (lr {spec.lr:g})"))
        if value > threshold:
            raise DivergenceError(
                _stopped(
                    refit,
                    position,
                    f"loss {value:.4g} at step {bad_step} is above the divergence threshold "
                    f"{threshold:.3g} (divergence_factor {spec.divergence_factor:g} x ln(d_vocab {spec.d_vocab}); "
                    f"lr {spec.lr:g}), so the run diverged",
                )  # fmt: skip
                + f" If a loss this high is expected, raise `architectures.{spec.name}.divergence_factor` instead."
            )
    position.row_losses.extend(values)
    step_losses.clear()


def _save_snapshot(refit: Refit, position: Position, model: Any, step_losses: list[torch.Tensor]) -> None:
    """Keep the weights after step `position.step` (headstab.training.snapshots), checked first like a checkpoint's."""
    _flush_losses(refit, position, step_losses)
    _check_weights(refit, position, model)
    meta = {"source": "training", "architecture": refit.spec.to_dict(), "seed": refit.seed, "step": position.step,
            "tokens_trained": position.step * refit.spec.tokens_per_step, "steps": refit.steps,
            "corpus": refit.corpus}  # fmt: skip
    save_snapshot(model, staged_snapshot_dir(refit.out_dir, position.step), meta)


def _check_weights(refit: Refit, position: Position, model: Any) -> None:
    """Stop before saving weights that are not finite (one host sync per checkpoint)."""
    if not bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()):
        what = f"the weights are not finite after step {position.step} (lr {refit.spec.lr:g})"
        raise NonFiniteLossError(_stopped(refit, position, what))


def _stopped(refit: Refit, position: Position, what: str) -> str:
    """The message of a divergence stop: what happened, what is kept, and the keys to change."""
    spec, last_good = refit.spec, position.last_good
    kept = (f"The last full-state checkpoint before it, {last_good}, is kept" if last_good
            else "No full-state checkpoint was written")  # fmt: skip
    why = " because the checkpoints were written with another lr" if last_good else ""
    return (
        f"{spec.name} seed {refit.seed}: {what}; training stopped. {kept} and final.pt was not written. Lower the "
        f"learning rate: set `architectures.{spec.name}.lr` to {spec.lr / 10:g} (lr / 10) and rerun; training "
        f"restarts from step 0{why} (lower the lr again if it diverges again)."
    )


def _write_log(path: Path, rows: list[list[Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(LOG_COLUMNS)
        writer.writerows(rows)


def _progress(enabled: bool, refit: Refit, initial: int) -> Any:
    from tqdm import tqdm

    # A log file is not a terminal: update it rarely so it stays readable.
    interval = 1.0 if sys.stderr.isatty() else 30.0
    return tqdm(total=refit.steps, initial=initial, desc=f"{refit.spec.name} seed{refit.seed}", unit="step",
                file=sys.stderr, mininterval=interval, disable=not enabled, dynamic_ncols=True)  # fmt: skip


# ---------------------------------------------------------------- outputs
def write_outputs(refit: Refit, position: Position, model: Any, session_start: float) -> dict[str, Any]:
    """Weights first, then meta.json, the record that says they are complete; returns its content."""
    spec = refit.spec
    _check_weights(refit, position, model)
    missing = missing_snapshots(refit.out_dir, trained_snapshot_steps(spec), refit.steps)
    if missing:  # a snapshot deleted or damaged after it was written: only a retraining restores it
        raise TrainingError(
            f"{spec.name} seed {refit.seed}: the snapshots of steps {missing} in {refit.out_dir / 'snapshots'} are "
            f"missing or fail their sha256; delete {refit.out_dir}/state_*.pt and rerun, which retrains from step 0"
        )
    save_weights(model, refit.out_dir / "final.pt")
    wall = position.seconds()
    meta = {
        "architecture": spec.to_dict(),
        "seed": refit.seed if refit.name is None else refit.name,
        "init_seed": refit.seed,
        "data_seed": refit.seed if refit.data_seed is None else refit.data_seed,
        "steps": refit.steps,
        "tokens_trained": refit.steps * spec.tokens_per_step,
        "windows_available": refit.data.n_windows,
        "final_loss": float(position.log_rows[-1][2]) if position.log_rows else None,
        "weight_matrix_params": count_weight_matrix_params(model),
        "corpus": refit.corpus,
        "tokenizer": refit.tokenizer,
        "data_order": "np.random.default_rng(data_seed).permutation of all windows, one per epoch",
        "resumed_from": str(position.resumed_from) if position.resumed_from else None,
        "restarted_because": position.restarted_because,
        "training_seconds": round(wall, 3),
        "session_seconds": round(time.perf_counter() - session_start, 3),
        "threads": torch.get_num_threads(),
        "final_weights_sha256": sha256_file(refit.out_dir / "final.pt"),
        "environment": environment_record(str(refit.device)),
    }
    write_json_atomic(refit.out_dir / "meta.json", meta)
    prune_states(refit.out_dir, keep=1)  # the newest full state stays, to continue training later
    log.info("finished %s seed %d: final loss %s after %.1f s", spec.name, refit.seed, meta["final_loss"], wall)
    return meta
