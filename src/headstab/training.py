"""Training: one refit (architecture, seed) of the paper's §3.1 recipe, resumable and preemptible.

Data: the corpus's token shards (1-D uint16/uint32 streams, documents joined by EOS) are cut into
non-overlapping windows of `seq_len` tokens; the refit's seed shuffles the window order (one
permutation of all windows across shards per epoch), as the paper's code shuffles its dataset.
Optimiser: Adam (no weight decay) or AdamW (decoupled decay on every parameter), constant lr.

The checkpoint directory holds
  final.pt                  the trained weights (TransformerLens state-dict names), written last
  train_log.csv             step, tokens, loss (mean since the previous row), lr, seconds
  meta.json                 spec, seed, token count, corpus and tokenizer identity, environment
  state_{step:08d}.pt       full state (model, optimiser, RNG, step, data position, log rows) every
                            `checkpoint_every` steps, with a `.sha256` sidecar (the newest two are kept while
                            training, the newest one after); a rerun resumes from the newest one that
                            verifies and ends bit-identical to an uninterrupted run (CPU). A state written
                            under anything else that determines the weights (see `resume_identity`) or beyond
                            the steps now requested is logged, deleted, and training restarts from step 0.

Training stops with a DivergenceError (no final.pt) when a loss exceeds divergence_factor x ln(d_vocab)
or is not finite; full states with non-finite weights are never written.
"""

from __future__ import annotations

import csv
import logging
import math
import random
import shlex
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from headstab.config import ArchitectureSpec
from headstab.data.shards import load_shards
from headstab.models import build_model, count_weight_matrix_params, save_weights
from headstab.fileio import atomic_path, save_torch_atomic, sha256_file, write_json_atomic, write_text_atomic
from headstab.provenance import environment_record

log = logging.getLogger(__name__)

LOG_COLUMNS = ("step", "tokens", "loss", "lr", "seconds")
# Bump whenever the loop's numerics change (loss, optimiser step, data order, init): older full states then restart.
TRAINING_CODE_VERSION = 1
# Spec fields that determine the weights at a given step; a full state written under other values is not resumed.
# The lr is constant (no schedule) and Adam's betas/eps are torch's defaults, so lr alone sets each step's update.
# n_tokens, epochs, divergence_factor and the logging/checkpoint cadence only change where the run stops or
# what it writes (window_order of a longer run extends a shorter one's).
TRAJECTORY_FIELDS = (
    "n_layers", "n_heads", "d_model", "d_head", "d_mlp", "n_ctx", "d_vocab", "act_fn",
    "normalization_type", "positional_embedding_type", "init_mode", "attn_only",
    "tokenizer", "corpus", "optimizer", "lr", "weight_decay", "batch_size", "seq_len",
)  # fmt: skip


class TrainingError(RuntimeError):
    """Training cannot start or continue; the message names the file or config key and the fix."""


class DivergenceError(TrainingError):
    """A loss exceeded divergence_factor x ln(d_vocab); no final.pt, the last full state before it is kept."""


class NonFiniteLossError(DivergenceError):
    """The loss or the weights became NaN or infinite; no final.pt, the last finite full state is kept."""


def spec_from_dict(values: dict[str, Any]) -> ArchitectureSpec:
    """ArchitectureSpec from `ArchitectureSpec.to_dict()` output (e.g. Snakemake params)."""
    return ArchitectureSpec(**{**values, "seeds": tuple(values["seeds"])})


def resolve_device(device: str) -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TrainingError(f"config key 'compute.device' is '{device}' but no CUDA device is visible; use auto or cpu")
    return torch.device(device)


# ---------------------------------------------------------------- data
@dataclass(frozen=True)
class TokenWindows:
    """Non-overlapping `seq_len`-token windows over memory-mapped shards (a shard's tail shorter than seq_len is dropped)."""

    shards: tuple[np.ndarray, ...]  # each [token]
    first_window: np.ndarray  # [shard + 1] global index of each shard's first window (cumulative counts)
    seq_len: int

    @classmethod
    def open(cls, shard_paths: Sequence[str | Path], seq_len: int) -> "TokenWindows":
        shards = tuple(load_shards(shard_paths))
        counts = [len(s) // seq_len for s in shards]
        return cls(shards, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), seq_len)

    @property
    def n_windows(self) -> int:
        return int(self.first_window[-1])

    def max_token_id(self) -> int:
        return max((int(s.max()) for s in self.shards if len(s)), default=-1)

    def batch(self, window_ids: np.ndarray) -> torch.Tensor:
        """Tokens of the given global windows, [batch, seq_len] int64."""
        shard_of = np.searchsorted(self.first_window, window_ids, side="right") - 1
        starts = (window_ids - self.first_window[shard_of]) * self.seq_len
        rows = [self.shards[s][o : o + self.seq_len] for s, o in zip(shard_of, starts)]
        return torch.from_numpy(np.stack(rows).astype(np.int64))


def window_order(n_windows: int, seed: int, n_needed: int) -> np.ndarray:
    """The first `n_needed` global window ids of the refit's data order, [n_needed].

    Epoch e is the e-th permutation of all windows drawn from np.random.default_rng(seed), so the
    order of a longer run extends that of a shorter one.
    """
    rng = np.random.default_rng(seed)
    n_epochs = max(1, math.ceil(n_needed / n_windows)) if n_windows else 0
    order = [rng.permutation(n_windows) for _ in range(n_epochs)]
    return np.concatenate(order)[:n_needed] if order else np.zeros(0, dtype=np.int64)


def training_steps(spec: ArchitectureSpec, n_windows: int, corpus_label: str) -> int:
    """Optimiser steps of a refit: `n_tokens // (batch_size * seq_len)`, or `epochs` passes when n_tokens is null."""
    available = n_windows * spec.epochs
    if spec.n_tokens is None:
        steps = available // spec.batch_size
    else:
        steps = spec.n_tokens // spec.tokens_per_step
        if steps * spec.batch_size > available:
            raise TrainingError(
                f"corpus {corpus_label} holds {n_windows:,} windows of seq_len {spec.seq_len} "
                f"({n_windows * spec.seq_len:,} tokens usable, x{spec.epochs} epochs = {available * spec.seq_len:,}), "
                f"fewer than the {spec.n_tokens:,} tokens (n_tokens) architecture '{spec.name}' requests; lower "
                f"`architectures.{spec.name}.n_tokens` (or architecture_defaults.n_tokens) or build a larger corpus "
                f"(`corpora.{spec.corpus}.n_tokens`, or n_documents for a synthetic corpus)"
            )
    if steps < 1:
        raise TrainingError(
            f"architecture '{spec.name}' gets 0 training steps from corpus {corpus_label} ({n_windows} windows of "
            f"{spec.seq_len} tokens, batch_size {spec.batch_size}, n_tokens {spec.n_tokens}); raise "
            f"`architectures.{spec.name}.n_tokens` or build a larger corpus"
        )
    return steps


def check_vocabulary(spec: ArchitectureSpec, tokenizer_size: int | None, max_token_id: int, tokenizer_label: str, corpus_label: str) -> None:
    """The model's embedding must cover the tokenizer and every token id in the shards."""
    if tokenizer_size is not None and tokenizer_size > spec.d_vocab:
        raise TrainingError(
            f"tokenizer {tokenizer_label} has {tokenizer_size:,} tokens, more than d_vocab {spec.d_vocab:,} of "
            f"architecture '{spec.name}'; raise `architectures.{spec.name}.d_vocab` (or architecture_defaults.d_vocab) "
            f"to at least {tokenizer_size}, or use a smaller tokenizer"
        )
    if max_token_id >= spec.d_vocab:
        raise TrainingError(
            f"corpus {corpus_label} holds token id {max_token_id:,}, outside d_vocab {spec.d_vocab:,} of architecture "
            f"'{spec.name}'; were the shards built with another tokenizer? Rebuild them (delete the corpus directory "
            f"and rerun) or raise `architectures.{spec.name}.d_vocab`"
        )


# ---------------------------------------------------------------- full-state checkpoints
def state_path(out_dir: Path, step: int) -> Path:
    return out_dir / f"state_{step:08d}.pt"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _rng_state() -> dict[str, Any]:
    # Plain tensors, strings and numbers only, so torch.load(weights_only=True) reads it back.
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos, "has_gauss": has_gauss, "gauss": gauss},
        "python": {"version": version, "state": list(py_state), "gauss": py_gauss},
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np_state = state["numpy"]
    np.random.set_state((np_state["kind"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"], np_state["has_gauss"], np_state["gauss"]))
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))


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
            log.warning("checkpoint %s fails its sha256 check (expected %s, found %s); skipping it", path, expected, found)
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=True), path
        except Exception as err:  # verified bytes that still do not load: report and fall back
            log.warning("checkpoint %s cannot be loaded (%s: %s); skipping it", path, type(err).__name__, err)
    return None, None


def resume_identity(spec: ArchitectureSpec, seed: int, corpus_sha256: str | None, autocast_bf16: bool,
                    compile_model: bool) -> dict[str, Any]:
    """Everything that determines a refit's weights at a given step; a full state resumes only if it matches."""
    return {**{k: getattr(spec, k) for k in TRAJECTORY_FIELDS}, "seed": seed, "corpus_meta_sha256": corpus_sha256,
            "autocast_bf16": autocast_bf16, "compile_model": compile_model,
            "training_code_version": TRAINING_CODE_VERSION}  # fmt: skip


def why_not_resumable(state: dict[str, Any], identity: dict[str, Any], steps: int) -> str | None:
    """None when `state` continues this refit, else why not, e.g.
    'written with another configuration: lr (checkpoint 0.01, now 0.003)'."""
    saved = state["identity"]
    differing = [f"{k} (checkpoint {saved.get(k)!r}, now {identity.get(k)!r})"
                 for k in {**identity, **saved} if saved.get(k) != identity.get(k)]  # fmt: skip
    if differing:
        return f"written with another configuration: {', '.join(differing)}"
    if state["step"] > steps:
        return f"at step {state['step']}, beyond the {steps} steps now requested"
    return None


# ---------------------------------------------------------------- the loop
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


def next_token_loss(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy of `tokens` [batch, pos] (TransformerLens's own loss)."""
    return model(tokens, return_type="loss")


def _compiled_loss(model: Any) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    # Opt-in GPU path: compile the plain module (the bridge's hooks break graphs); fused cross entropy
    # equals TransformerLens's loss up to float rounding.
    compiled = torch.compile(model.original_model)

    def loss_fn(_model: Any, tokens: torch.Tensor) -> torch.Tensor:
        logits = compiled(tokens)
        return torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten()
        )

    return loss_fn


def _write_log(path: Path, rows: list[list[Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(LOG_COLUMNS)
        writer.writerows(rows)


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
    autocast_bf16: bool = False,
    compile_model: bool = False,
    progress: bool = True,
    on_step_end: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train refit `seed` of `spec` on the token shards; write final.pt, train_log.csv, meta.json into `out_dir`.

    Resumes from the newest verified `state_*.pt` in `out_dir`. `tokenizer_dir` None skips the
    tokenizer-size check (the shards' token ids are always checked). `autocast_bf16` and
    `compile_model` are opt-in GPU speed-ups (off: the paper's float32). `on_step_end(step)` is
    called after each step's checkpoint (tests raise in it to simulate a kill). Returns meta.json's content.
    """
    session_start = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(".*.tmp"):  # left by a job killed mid-write
        stale.unlink()
    if threads:
        torch.set_num_threads(threads)
    device_ = resolve_device(device)
    corpus_label = f"'{spec.corpus}' ({corpus_meta_path or ', '.join(map(str, shard_paths))})"

    # ---- inputs: tokenizer, shards, budget, data order
    tokenizer_info = None
    if tokenizer_dir is not None:
        from headstab.tokenizer import tokenizer_identity

        tokenizer_info = tokenizer_identity(tokenizer_dir)
    data = TokenWindows.open(shard_paths, spec.seq_len)
    check_vocabulary(spec, tokenizer_info["vocab_size"] if tokenizer_info else None, data.max_token_id(),
                     str(tokenizer_dir), corpus_label)  # fmt: skip
    steps = training_steps(spec, data.n_windows, corpus_label)
    order = window_order(data.n_windows, seed, steps * spec.batch_size)
    if corpus_meta_path is not None and not Path(corpus_meta_path).is_file():
        raise TrainingError(
            f"corpus metadata {corpus_meta_path} does not exist; build it with "
            f"`snakemake {shlex.quote(str(corpus_meta_path))}` (rule corpus_meta)"
        )
    corpus_sha256 = sha256_file(corpus_meta_path) if corpus_meta_path else None
    identity = resume_identity(spec, seed, corpus_sha256, autocast_bf16, compile_model)

    # ---- model, optimiser, and the state to resume from
    model = build_model(spec, seed, device=device_)
    model.train()
    optimizer = make_optimizer(spec, model.parameters())
    loss_fn = _compiled_loss(model) if compile_model else next_token_loss
    start_step, log_rows, row_losses, seconds_before = 0, [], [], 0.0
    state, resumed_from = load_latest_state(out_dir)
    reason = why_not_resumable(state, identity, steps) if state is not None else None
    restarted_because = f"{resumed_from.name} {reason}" if reason else None
    if reason:
        log.warning("checkpoint %s cannot be resumed (%s); %s seed %d restarts from step 0 and deletes the stale "
                    "%s/state_*.pt", resumed_from, reason, spec.name, seed, out_dir)  # fmt: skip
        # Their configuration no longer exists: deleted so that no later rerun can pick them up.
        prune_states(out_dir, keep=0)
        state, resumed_from = None, None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        _set_rng_state(state["rng"])
        start_step, log_rows, row_losses = state["step"], state["log_rows"], state["row_losses"]
        seconds_before = state["seconds"]
        state = None  # free the loaded copy of the weights and moments
        log.info("resuming %s seed %d from %s (step %d of %d)", spec.name, seed, resumed_from, start_step, steps)
    log.info(
        "training %s seed %d on %s: %d steps x %d x %d tokens = %s tokens (%d windows available), %s, %d weight-matrix "
        "params, %s lr %g wd %g", spec.name, seed, device_, steps, spec.batch_size, spec.seq_len,
        f"{steps * spec.tokens_per_step:,}", data.n_windows, f"{torch.get_num_threads()} threads",
        count_weight_matrix_params(model), spec.optimizer, spec.lr, spec.weight_decay,
    )  # fmt: skip

    log_path = out_dir / "train_log.csv"
    _write_log(log_path, log_rows)  # drops rows a killed run logged after its last checkpoint
    last_good = resumed_from
    autocast = torch.autocast(device_.type, dtype=torch.bfloat16) if autocast_bf16 else nullcontext()
    step_losses: list[torch.Tensor] = []  # on device: no host sync per step
    threshold = spec.divergence_factor * math.log(spec.d_vocab)
    loop_start = time.perf_counter()

    def stopped(what: str) -> str:
        """The message of a divergence stop: what happened, what is kept, and the keys to change."""
        kept = (f"The last full-state checkpoint before it, {last_good}, is kept" if last_good
                else "No full-state checkpoint was written")  # fmt: skip
        why = " because the checkpoints were written with another lr" if last_good else ""
        return (
            f"{spec.name} seed {seed}: {what}; training stopped. {kept} and final.pt was not written. Lower the "
            f"learning rate: set `architectures.{spec.name}.lr` to {spec.lr / 10:g} (lr / 10) and rerun; training "
            f"restarts from step 0{why} (lower the lr again if it diverges again)."
        )

    def flush_losses(step: int) -> None:
        """Move the steps' losses to the host; stop on the first non-finite or diverged one."""
        values = torch.stack(step_losses).float().cpu().tolist() if step_losses else []
        for offset, value in enumerate(values):
            bad_step = step - len(values) + offset + 1
            if not math.isfinite(value):
                raise NonFiniteLossError(stopped(f"loss is {value} at step {bad_step} (lr {spec.lr:g})"))
            if value > threshold:
                raise DivergenceError(
                    stopped(f"loss {value:.4g} at step {bad_step} is above the divergence threshold {threshold:.3g} "
                            f"(divergence_factor {spec.divergence_factor:g} x ln(d_vocab {spec.d_vocab}); lr "
                            f"{spec.lr:g}), so the run diverged")  # fmt: skip
                    + f" If a loss this high is expected, raise `architectures.{spec.name}.divergence_factor` instead."
                )
        row_losses.extend(values)
        step_losses.clear()

    def check_weights(step: int) -> None:
        """Stop before saving weights that are not finite (one host sync per checkpoint)."""
        if not bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()):
            raise NonFiniteLossError(stopped(f"the weights are not finite after step {step} (lr {spec.lr:g})"))

    with open(log_path, "a", newline="") as log_handle, _progress(progress, steps, start_step, spec, seed) as bar:
        writer = csv.writer(log_handle)
        for step in range(start_step + 1, steps + 1):
            # batch -> forward -> backward -> step
            window_ids = order[(step - 1) * spec.batch_size : step * spec.batch_size]
            tokens = data.batch(window_ids).to(device_, non_blocking=True)
            with autocast:
                loss = loss_fn(model, tokens)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step_losses.append(loss.detach())
            bar.update(1)
            # log
            seconds = seconds_before + time.perf_counter() - loop_start
            if step % spec.log_every == 0 or step == steps:
                flush_losses(step)
                row = [step, step * spec.tokens_per_step, f"{np.mean(row_losses):.6f}", f"{spec.lr:g}", f"{seconds:.2f}"]
                writer.writerow(row)
                log_handle.flush()
                log_rows.append(row)
                row_losses = []
                bar.set_postfix(loss=row[2], refresh=False)
            # checkpoint
            if step % spec.checkpoint_every == 0:
                flush_losses(step)
                check_weights(step)
                state = {
                    "step": step,
                    "windows_consumed": step * spec.batch_size,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "rng": _rng_state(),
                    "log_rows": log_rows,
                    "row_losses": row_losses,
                    "seconds": seconds,
                    "identity": identity,
                }
                last_good = save_state(out_dir, state, keep=max(1, keep_checkpoints))
            if on_step_end is not None:
                on_step_end(step)

    # ---- outputs: weights first, then the record that says they are complete
    check_weights(steps)
    save_weights(model, out_dir / "final.pt")
    wall = seconds_before + time.perf_counter() - loop_start
    meta = {
        "architecture": spec.to_dict(),
        "seed": seed,
        "steps": steps,
        "tokens_trained": steps * spec.tokens_per_step,
        "windows_available": data.n_windows,
        "final_loss": float(log_rows[-1][2]) if log_rows else None,
        "weight_matrix_params": count_weight_matrix_params(model),
        "corpus": {"name": spec.corpus, "meta": str(corpus_meta_path) if corpus_meta_path else None,
                   "meta_sha256": corpus_sha256, "shards": [str(p) for p in shard_paths]},
        "tokenizer": tokenizer_info,
        "data_order": "np.random.default_rng(seed).permutation of all windows, one per epoch",
        "resumed_from": str(resumed_from) if resumed_from else None,
        "restarted_because": restarted_because,
        "training_seconds": round(wall, 3),
        "session_seconds": round(time.perf_counter() - session_start, 3),
        "threads": torch.get_num_threads(),
        "opt_ins": {"autocast_bf16": autocast_bf16, "compile_model": compile_model},
        "final_weights_sha256": sha256_file(out_dir / "final.pt"),
        "environment": environment_record(str(device_)),
    }  # fmt: skip
    write_json_atomic(out_dir / "meta.json", meta)
    prune_states(out_dir, keep=1)  # the newest full state stays, to continue training later
    log.info("finished %s seed %d: final loss %s after %.1f s", spec.name, seed, meta["final_loss"], wall)
    return meta


def _progress(enabled: bool, total: int, initial: int, spec: ArchitectureSpec, seed: int) -> Any:
    from tqdm import tqdm

    # A log file is not a terminal: update it rarely so it stays readable.
    interval = 1.0 if sys.stderr.isatty() else 30.0
    return tqdm(total=total, initial=initial, desc=f"{spec.name} seed{seed}", unit="step", file=sys.stderr,
                mininterval=interval, disable=not enabled, dynamic_ncols=True)  # fmt: skip
