"""The training loop: the refits of one job stacked on a seed axis and stepped together.

One step of the stack: every refit's batch (its own data order) -> forward -> each refit's loss ->
backward -> one optimiser step; the losses stay on the device. Snapshots, log rows and full states come
at their cadence (headstab.plan.spec); only there are the losses read (one host sync), checked refit by
refit, and a refit that diverged is dropped from the stack while the others go on untouched. Refits
resumed at different steps join the stack when it reaches theirs, so a job whose refits are partly
trained trains only what is missing; one refit alone (k = 1) runs the same code.

Optimiser: Adam (no weight decay) or AdamW (decoupled decay on every parameter), constant lr; the loss is
TransformerLens's mean next-token cross entropy, in float32.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from headstab.plan.spec import ArchitectureSpec
from headstab.provenance.records import environment_record
from headstab.refits.models import resolve_device
from headstab.training.checkpoint import save_state
from headstab.training.errors import DivergenceError, NonFiniteLossError, TrainingError
from headstab.training.options import RefitTarget, TrainingData, TrainingOptions
from headstab.training.refit import (
    Corpus,
    Refit,
    append_log_row,
    divergence_threshold,
    full_state,
    open_corpus,
    prepare_refit,
    snapshot_record,
    stop_message,
    write_outputs,
)
from headstab.training.snapshots import save_snapshot, staged_snapshot_dir
from headstab.training.stack import assemble, finite_refits, split

log = logging.getLogger("headstab.training")  # the package's one logger name, as docs/operations.md quotes it


def train_refits(
    spec: ArchitectureSpec, refits: Sequence[RefitTarget], data: TrainingData, options: TrainingOptions | None = None
) -> list[dict[str, Any]]:
    """Train `refits` of `spec` together; write each one's final.pt, train_log.csv and meta.json into its out_dir.

    A refit's name sets its initial weights and the order of its windows (the paper's design); a seed-grid
    refit "{init}-{data}" (headstab.plan.seed_design) draws them from its two seeds. Each refit resumes from
    the newest verified `state_*.pt` of its out_dir written under the same configuration. Returns the
    refits' meta.json contents, in order. When refits diverged, the others' outputs are written first, then
    the DivergenceError (NonFiniteLossError) names every refit that stopped.
    """
    options = options or TrainingOptions()
    session_start = time.perf_counter()
    device = resolve_device(options.device)
    if options.threads:
        torch.set_num_threads(options.threads)
    corpus = open_corpus(spec, data)
    members = [prepare_refit(spec, corpus, target, options.precision) for target in refits]
    log.info("%s", _header(spec, corpus, members, device, options))
    Stack(spec, corpus, options, device).train(members)
    job = {
        "job_refits": [r.name for r in members],
        "session_seconds": round(time.perf_counter() - session_start, 3),
        "environment": environment_record(str(device)),
    }
    metas = [write_outputs(refit, corpus, options, job) for refit in members if refit.error is None]
    errors = [refit.error for refit in members if refit.error is not None]
    if errors:
        raise _job_error(errors, len(members))
    return metas


def train_refit(
    spec: ArchitectureSpec,
    seed: int | str,
    data: TrainingData | Sequence[str | Path],
    out_dir: str | Path,
    options: TrainingOptions | None = None,
) -> dict[str, Any]:
    """Train one refit (a job of one): `train_refits` with `data` a TrainingData or the shard paths alone."""
    data = data if isinstance(data, TrainingData) else TrainingData.of(data)
    return train_refits(spec, [RefitTarget(seed, Path(out_dir))], data, options)[0]


def _header(
    spec: ArchitectureSpec, corpus: Corpus, refits: list[Refit], device: torch.device, options: TrainingOptions
) -> str:
    """The job's first log line: what trains, how long, with what."""
    names = ", ".join(str(refit.name) for refit in refits)
    return (
        f"training {spec.name} seeds {names} on {device}: {corpus.steps} steps x {spec.batch_size} x {spec.seq_len} "
        f"tokens = {corpus.steps * spec.tokens_per_step:,} tokens each ({corpus.data.n_windows} windows available), "
        f"{torch.get_num_threads()} threads, {spec.n_params:,} weight-matrix params each, {spec.optimizer} lr "
        f"{spec.lr:g} wd {spec.weight_decay:g}, precision {options.precision}, attention {options.attention}, "
        f"compile {options.compile}"
    )


def _job_error(errors: list[TrainingError], n_refits: int) -> TrainingError:
    """One refit's own error, or for several refits one error naming every refit that stopped."""
    if n_refits == 1:
        return errors[0]
    kind = NonFiniteLossError if all(isinstance(e, NonFiniteLossError) for e in errors) else DivergenceError
    return kind(
        f"{len(errors)} of the {n_refits} refits of this job stopped (the others finished and wrote their outputs): "
        + " | ".join(str(error) for error in errors)
    )


class Stack:
    """The refits training together now: their model and optimiser, and their losses not yet read."""

    def __init__(self, spec: ArchitectureSpec, corpus: Corpus, options: TrainingOptions, device: torch.device):
        self.spec, self.corpus, self.options, self.device = spec, corpus, options, device
        self.refits: list[Refit] = []
        self.model: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.loss_fn: Any = None
        self.losses: list[torch.Tensor] = []  # one [refit] tensor per step since the last read, on the device

    def train(self, refits: list[Refit]) -> None:
        """Step every refit to the end of its budget (or to its divergence); a refit joins at its own step."""
        steps = self.corpus.steps
        waiting = sorted((r for r in refits if r.position.step < steps), key=lambda r: r.position.step)
        with _progress(self.options.progress, self.spec, refits, steps) as bar:
            while waiting or self.refits:
                step = self.refits[0].position.step if self.refits else waiting[0].position.step
                joining = [r for r in waiting if r.position.step == step]
                waiting = [r for r in waiting if r.position.step != step]
                if joining:
                    self.reform([r for r in self.refits if r not in self.read_losses()] + joining)
                self.advance(waiting[0].position.step if waiting else steps, bar)
                if self.refits and self.refits[0].position.step == steps:
                    self.release()

    def advance(self, until: int, bar: Any) -> None:
        """Training steps of the stack up to step `until`, with snapshots, log rows and checkpoints on the way."""
        while self.refits and self.refits[0].position.step < until:
            step = self.refits[0].position.step + 1
            batches = torch.stack([self.corpus.data.batch(r.window_ids(step)) for r in self.refits])
            if self.device.type == "cuda":
                batches = batches.pin_memory()  # so the copy below does not wait for the device
            tokens = batches.to(self.device, non_blocking=True)
            with self.model.matmul_precision():
                loss = self.loss_fn(tokens)
                self.optimizer.zero_grad(set_to_none=True)
                self.model.backward(loss)
            self.optimizer.step()
            self.losses.append(loss.detach())
            for refit in self.refits:
                refit.position.step = step
            bar.update(step - bar.n)
            self.at_step_end(step)
            if self.options.on_step_end is not None:
                self.options.on_step_end(step)

    def at_step_end(self, step: int) -> None:
        """Snapshot, log row, full state: whichever falls on `step`, after reading and checking the losses."""
        spec, steps = self.spec, self.corpus.steps
        snapshot = step in spec.snapshot_steps
        log_row = step % spec.log_every == 0 or step == steps
        checkpoint = step % spec.checkpoint_every == 0 or step == steps  # the last step's state: resume to export
        if not (snapshot or log_row or checkpoint):
            return
        stopped = self.read_losses()
        if snapshot or checkpoint:  # weights that are not finite are never written
            for refit, finite in zip(self.refits, finite_refits(self.model)):
                if not finite and refit not in stopped:
                    what = f"the weights are not finite after step {step} (lr {spec.lr:g})"
                    refit.error = NonFiniteLossError(stop_message(refit, what))
                    stopped.append(refit)
        if stopped:
            self.reform([r for r in self.refits if r not in stopped])
        if snapshot:
            for i, refit in enumerate(self.refits):
                weights = {name: t.cpu() for name, t in self.model.seed_state_dict(i).items()}
                save_snapshot(weights, staged_snapshot_dir(refit.out_dir, step), snapshot_record(refit, self.corpus))
        if log_row:
            for refit in self.refits:
                append_log_row(refit)
        if checkpoint and self.refits:
            keep = max(1, self.options.keep_checkpoints)
            for refit, state in zip(self.refits, split(self.model, self.optimizer, range(len(self.refits)))):
                refit.position.last_good = save_state(refit.out_dir, full_state(refit, state), keep=keep)

    def read_losses(self) -> list[Refit]:
        """Move the losses since the last read to their refits (one host sync); the refits that diverged, stopped."""
        if not self.losses:
            return []
        values = torch.stack(self.losses).float().cpu()  # [step, refit]
        self.losses.clear()
        stopped = []
        for i, refit in enumerate(self.refits):
            column = values[:, i].tolist()
            refit.error = _divergence(refit, column)
            if refit.error is not None:
                stopped.append(refit)
            else:
                refit.position.row_losses.extend(column)
        return stopped

    def release(self) -> None:
        """Every member's weights and optimiser state back in its position; no stack left."""
        for refit, state in zip(self.refits, split(self.model, self.optimizer, range(len(self.refits)))):
            refit.position.state = state
        self.model = self.optimizer = self.loss_fn = None
        self.refits = []

    def reform(self, refits: list[Refit]) -> None:
        """Stack `refits` anew: the current members that stay hand over their weights and optimiser state, the
        others keep theirs in their position (losses must have been read)."""
        staying = [i for i, refit in enumerate(self.refits) if refit in refits]
        if self.model is not None and staying:
            for i, state in zip(staying, split(self.model, self.optimizer, staying)):
                self.refits[i].position.state = state
        self.model = self.optimizer = self.loss_fn = None  # freed before the next stack is built
        self.refits = list(refits)
        if not refits:
            return
        states = [refit.position.state for refit in refits]
        self.model, self.optimizer = assemble(self.spec, states, self.options, self.device)
        for refit in refits:
            refit.position.state = None
            refit.position.clock = refit.position.clock or time.perf_counter()
        self.loss_fn = torch.compile(self.model.loss) if self.options.compile else self.model.loss


def _divergence(refit: Refit, losses: list[float]) -> TrainingError | None:
    """The stop of the first non-finite or diverged loss among `losses`, the refit's latest steps; None if none."""
    spec = refit.spec
    threshold = divergence_threshold(spec)
    for offset, value in enumerate(losses):
        bad_step = refit.position.step - len(losses) + offset + 1
        if not math.isfinite(value):
            return NonFiniteLossError(stop_message(refit, f"loss is {value} at step {bad_step} (lr {spec.lr:g})"))
        if value > threshold:
            what = (
                f"loss {value:.4g} at step {bad_step} is above the divergence threshold {threshold:.3g} "
                f"(divergence_factor {spec.divergence_factor:g} x ln(d_vocab {spec.d_vocab}); lr {spec.lr:g}), "
                "so the run diverged"
            )
            return DivergenceError(
                stop_message(refit, what)
                + f" If a loss this high is expected, raise `architectures.{spec.name}.divergence_factor` instead."
            )
    return None


def _progress(enabled: bool, spec: ArchitectureSpec, refits: list[Refit], steps: int) -> Any:
    from tqdm import tqdm

    # A log file is not a terminal: update it rarely so it stays readable.
    interval = 1.0 if sys.stderr.isatty() else 30.0
    start = min((r.position.step for r in refits), default=steps)
    desc = f"{spec.name} seed{','.join(str(r.name) for r in refits)}"
    return tqdm(
        total=steps,
        initial=start,
        desc=desc,
        unit="step",
        file=sys.stderr,
        mininterval=interval,
        disable=not enabled,
        dynamic_ncols=True,
    )
