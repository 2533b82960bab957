"""Training-throughput benchmark: our `train_refit` against TransformerLens's own loop.

Same model (the demo's l4_h8 at the same seed), same data (synthetic token windows of seq_len 128
in a uint16 shard), same batch (8), same optimiser (Adam, lr 1e-3), same number of steps, same
torch threads and device:
- ours: `headstab.training.train_refit` (a train job of one refit, the plain training model): model
  build, full-state checkpoints with sha256 sidecars every `checkpoint_every` steps, train_log.csv
  every `log_every` steps, final.pt and meta.json at the end;
- theirs: `transformer_lens.tools.training.train` (present in transformer-lens 4.3.0) with
  `TrainConfig(save_every=checkpoint_every, print_every=log_every)`, model build included.
tokens/s = steps x batch x seq_len / wall seconds of the whole call; runs alternate, medians reported.

Run alone: `python benchmarks/bench_train.py [--quick] [--device cpu|cuda]`.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported: neither loop's progress bar is work

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

log = logging.getLogger("benchmarks.train")


def bench_spec(steps: int, architecture: str = "l4_h8") -> Any:
    """The demo architecture with one epoch of `steps` batches (n_tokens None: the whole shard)."""
    from headstab.plan.config import architecture_spec, load_config

    spec = architecture_spec(load_config(common.REPO / "config" / "demo.yaml"), architecture)
    return dataclasses.replace(
        spec, n_tokens=None, epochs=1, checkpoint_every=max(1, steps // 2), log_every=8, snapshot_steps=()
    )


class WindowDataset:
    """torch-style dataset of {"tokens": [seq_len]} windows, as TransformerLens's train() expects."""

    def __init__(self, windows: np.ndarray):
        import torch

        self.windows = torch.from_numpy(windows.astype(np.int64))

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"tokens": self.windows[index]}


def bench_train(
    work_dir: Path, repeats: int = 3, steps: int = 48, device: str = "cpu", seed: int = 1, threads: int = 1
) -> dict[str, Any]:
    import torch
    from transformer_lens.tools.training import TrainConfig, train

    from headstab.refits.models import build_model
    from headstab.training import TrainingOptions, train_refit

    spec = bench_spec(steps)
    n_windows = steps * spec.batch_size
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, spec.d_vocab, size=n_windows * spec.seq_len, dtype=np.uint16)
    work_dir.mkdir(parents=True, exist_ok=True)
    shard = work_dir / "shard_000.npy"
    np.save(shard, tokens)
    windows = tokens.reshape(n_windows, spec.seq_len)
    n_tokens = steps * spec.tokens_per_step
    # The demo trains with compute.train_threads 1 (refits run in parallel jobs); both loops get the same.
    torch.set_num_threads(threads)

    def ours(run: int) -> None:
        options = TrainingOptions(device=device, threads=threads, progress=False)
        train_refit(spec, seed, [shard], work_dir / f"ours{run}", options)

    def theirs(run: int) -> None:
        out_dir = work_dir / f"theirs{run}"
        out_dir.mkdir()
        model = build_model(spec, seed, device=device)
        config = TrainConfig(
            num_epochs=1, batch_size=spec.batch_size, lr=spec.lr, seed=seed, optimizer_name="Adam", device=device,
            save_every=spec.checkpoint_every, save_dir=str(out_dir), print_every=spec.log_every,
        )  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()):  # its loss prints; the print itself stays timed
            train(model, config, WindowDataset(windows))

    logging.getLogger("headstab").setLevel(logging.WARNING)
    ours(-1), theirs(-1)  # warm-up: imports, allocator, thread pools
    ours_runs, theirs_runs = [], []
    for run in range(repeats):
        ours_runs.append(common.timed(lambda: ours(run))[0])
        theirs_runs.append(common.timed(lambda: theirs(run))[0])
    ours_rate = n_tokens / float(np.median(ours_runs))
    theirs_rate = n_tokens / float(np.median(theirs_runs))
    return {
        "train_vs_transformer_lens": ours_rate / theirs_rate,
        "train_tokens_per_second": ours_rate,
        "train_transformer_lens_tokens_per_second": theirs_rate,
        "train_ours_runs": ours_runs,
        "train_transformer_lens_runs": theirs_runs,
        "train_setup": (
            f"demo {spec.name} (seed {seed}), {steps} steps x batch {spec.batch_size} x seq {spec.seq_len} = "
            f"{n_tokens} tokens, Adam lr {spec.lr:g}, device {device}, torch threads {torch.get_num_threads()}; "
            f"checkpoint every {spec.checkpoint_every} steps, log every {spec.log_every}; baseline "
            "transformer_lens.tools.training.train (transformer-lens 4.3.0)"
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8 steps, 1 repeat (smoke test)")
    parser.add_argument("--device", default="cpu", help="torch device for both loops (cpu, cuda, ...)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for both loops (demo: 1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        results = (bench_train(work_dir, repeats=1, steps=8, device=args.device, threads=args.threads) if args.quick
                   else bench_train(work_dir, device=args.device, threads=args.threads))  # fmt: skip
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
