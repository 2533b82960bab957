"""The plain training model (`headstab.training.model.StackedTransformer`) against the TransformerBridge it replaces,
and the training loop's stacks of refits against refits trained alone, on the CPU.

Measurements, side by side in one process:
- ops per training step: every aten operator that one forward and backward pass dispatches (a
  TorchDispatchMode counter; `kernels` leaves out the views, which launch nothing), for the bridge
  (`model(tokens, return_type="loss")`, then `.backward()`, as `headstab.training.loop.train_step`)
  and the plain model (`model.backward(model.loss(tokens))`) at k = 1 and k = 4, on an 8-layer demo-shaped
  model (d_model 64, 8 heads of 8, d_mlp 256, d_vocab 1024). `plain_vs_bridge_ops_per_step` is plain / bridge.
- seconds per training step (forward, backward, Adam step, as the training loop runs them) of the bridge,
  the plain model at k = 1 and at k = 4 per seed (its step time / 4), each with materialised attention and
  with sdpa, for the demo's l2_h8_attn and l4_h8 (batch 8 x seq 128), on `--threads` torch threads
  (default 1). Variants alternate within each repeat; medians over repeats of `steps` steps each.
  `stack_cpu_speedup_k4`: l4_h8's seconds per step alone over the k = 4 stack's per refit.
- `stack_vs_k1_max_abs_diff`: `headstab.training.train_refits` with 4 refits in one job against each refit in a
  job of its own (the whole loop: data order, Adam, checkpoints), demo l2_h8_attn on a Markov-chain token stream:
  the largest difference of any final weight (0: bit-identical).
- `stack_forward_max_abs_diff`: the logits of a stack of 4 refits at their initial weights against each refit's
  TransformerBridge (`build_model`), demo l4_h8, one batch.
- `train_bf16_loss_delta_sd`: the same 4 refits trained in one job with precision fp32 and with bf16 for `steps`
  steps (a short run: the full 2,048-step study is benchmarks/bench_precision.py): |difference of the mean final
  loss| / the seed-to-seed s.d. of the final loss (pooled, ddof 1).

Run alone: `python benchmarks/bench_training_model.py [--quick] [--threads N]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

log = logging.getLogger("benchmarks.training_model")

ARCHITECTURES = ("l2_h8_attn", "l4_h8")
SEEDS = (1, 2, 3, 4)


def demo_spec(architecture: str, **overrides: Any) -> Any:
    from headstab.plan.config import architecture_spec, load_config

    spec = architecture_spec(load_config(common.REPO / "config" / "demo.yaml"), architecture)
    # the benchmarks train a few steps: the demo's snapshot steps lie beyond them
    return dataclasses.replace(spec, **{"snapshot_steps": (), **overrides})


def demo_tokens(spec: Any, n_seeds: int, seed: int = 0) -> Any:
    """[n_seeds, batch, seq_len] random token ids, each seed its own batch."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, spec.d_vocab, (n_seeds, spec.batch_size, spec.seq_len), generator=generator)


def count_ops(fn: Callable[[], Any]) -> dict[str, Any]:
    """Aten operators `fn` dispatches: all of them (`ops`), those that are not views (`kernels`), by name."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.counts: Counter[str] = Counter()
            self.views = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.counts[str(func.overloadpacket.__name__)] += 1
            self.views += bool(func.is_view)
            return func(*args, **(kwargs or {}))

    with Counting() as counter:
        fn()
    total = sum(counter.counts.values())
    return {"ops": total, "kernels": total - counter.views, "by_op": dict(counter.counts.most_common())}


def bridge_setup(spec: Any, seed: int) -> tuple[Any, Any, Callable[[Any], Any]]:
    """(model, Adam, loss_backward) of the bridge, stepped as headstab.training.loop.train_step steps it."""
    import torch

    from headstab.refits.models import build_model

    model = build_model(spec, seed)
    model.train()

    def loss_backward(tokens: Any) -> Any:
        loss = model(tokens[0], return_type="loss")
        loss.backward()
        return loss

    return model, torch.optim.Adam(model.parameters(), lr=spec.lr), loss_backward


def plain_setup(spec: Any, seeds: tuple[int, ...], attention: str = "materialised") -> tuple[Any, Any, Callable]:
    import torch

    from headstab.training.model import StackedTransformer

    model = StackedTransformer.from_seeds(spec, list(seeds), attention=attention)

    def loss_backward(tokens: Any) -> Any:
        loss = model.loss(tokens)
        model.backward(loss)
        return loss

    return model, torch.optim.Adam(model.parameters(), lr=spec.lr), loss_backward


def bench_ops(n_layers: int = 8, **overrides: Any) -> dict[str, Any]:
    """Ops of one forward + backward pass, bridge vs plain (k = 1 and 4), l4_h8's shape with n_layers layers."""
    spec = demo_spec("l4_h8", n_layers=n_layers, **overrides)
    tokens = demo_tokens(spec, len(SEEDS))
    setups = {
        "bridge": (bridge_setup(spec, 1), tokens[:1]),
        "plain": (plain_setup(spec, (1,)), tokens[:1]),
        "plain_k4": (plain_setup(spec, SEEDS), tokens),
    }
    out: dict[str, Any] = {}
    for name, ((_model, optimizer, loss_backward), batch) in setups.items():
        loss_backward(batch)  # warm-up: lazy initialisation outside the count
        optimizer.zero_grad(set_to_none=True)
        out[name] = count_ops(lambda: loss_backward(batch))  # noqa: B023 (called at once)
        out[name]["adam_ops"] = count_ops(optimizer.step)["ops"]
        optimizer.zero_grad(set_to_none=True)
    return {
        "plain_vs_bridge_ops_per_step": out["plain"]["ops"] / out["bridge"]["ops"],
        "training_model_ops_per_step": {name: entry["ops"] for name, entry in out.items()},
        "training_model_kernels_per_step": {name: entry["kernels"] for name, entry in out.items()},
        "training_model_adam_ops_per_step": {name: entry["adam_ops"] for name, entry in out.items()},
        "training_model_ops_by_name": {name: entry["by_op"] for name, entry in out.items()},
        "training_model_ops_setup": f"{n_layers} layers of the demo's l4_h8 (d_model {spec.d_model}, {spec.n_heads} "
        f"heads of {spec.d_head}, d_mlp {spec.d_mlp}, d_vocab {spec.d_vocab}), batch {spec.batch_size} x "
        f"{spec.seq_len}, one forward + backward; adam_ops: one Adam step",
    }


def bench_step_times(architecture: str, steps: int, repeats: int, **overrides: Any) -> dict[str, Any]:
    """Median seconds per training step of each variant (plain_k4: per seed), variants alternating per repeat."""
    spec = demo_spec(architecture, **overrides)
    tokens = demo_tokens(spec, len(SEEDS))
    variants = {
        "bridge": (bridge_setup(spec, 1), tokens[:1], 1),
        "plain": (plain_setup(spec, (1,)), tokens[:1], 1),
        "plain_sdpa": (plain_setup(spec, (1,), attention="sdpa"), tokens[:1], 1),
        "plain_k4_per_seed": (plain_setup(spec, SEEDS), tokens, len(SEEDS)),
        "plain_k4_sdpa_per_seed": (plain_setup(spec, SEEDS, attention="sdpa"), tokens, len(SEEDS)),
    }

    def run(name: str) -> float:
        (model, optimizer, loss_backward), batch, n_seeds = variants[name]

        def train_steps() -> None:
            for _ in range(steps):
                loss_backward(batch)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        return common.timed(train_steps)[0] / steps / n_seeds

    for name in variants:  # warm-up: allocator, thread pools
        run(name)
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name in variants:
            runs[name].append(run(name))
    seconds = {name: float(np.median(values)) for name, values in runs.items()}
    return {
        "seconds_per_step": seconds,
        "speedup_vs_bridge": {name: seconds["bridge"] / value for name, value in seconds.items() if name != "bridge"},
        "runs": runs,
    }


def markov_shard(path: Path, d_vocab: int, n_tokens: int, seed: int = 0) -> Path:
    """A token stream from a fixed random Markov chain (each token has 4 likely successors): learnable, so the
    loss falls well below ln(d_vocab) and precision has something to move."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, d_vocab, size=(d_vocab, 4))
    tokens = np.empty(n_tokens, dtype=np.uint16)
    tokens[0] = 0
    choices = rng.integers(0, 4, size=n_tokens)
    noise = rng.random(n_tokens) < 0.1
    for i in range(1, n_tokens):
        tokens[i] = rng.integers(0, d_vocab) if noise[i] else successors[tokens[i - 1], choices[i]]
    np.save(path, tokens)
    return path


def train_job(spec: Any, shard: Path, root: Path, seeds: tuple, **options: Any) -> list[dict[str, Any]]:
    """`train_refits` of `seeds` in one job (CPU, no progress bar)."""
    from headstab.training import RefitTarget, TrainingData, TrainingOptions, train_refits

    targets = [RefitTarget(seed, root / f"seed{seed}") for seed in seeds]
    return train_refits(
        spec, targets, TrainingData.of([shard]), TrainingOptions(device="cpu", progress=False, **options)
    )


def bench_stack_equivalence(work_dir: Path, steps: int = 24, **overrides: Any) -> dict[str, Any]:
    """The loop's stack of 4 refits against each refit trained alone: the largest weight difference."""
    import torch

    spec = demo_spec("l2_h8_attn", n_tokens=None, checkpoint_every=max(1, steps // 2), log_every=8, **overrides)
    shard = markov_shard(work_dir / "shard_000.npy", spec.d_vocab, steps * spec.tokens_per_step)
    train_job(spec, shard, work_dir / "stack", SEEDS)
    for seed in SEEDS:
        train_job(spec, shard, work_dir / "alone", (seed,))
    diffs = []
    for seed in SEEDS:
        stacked = torch.load(work_dir / f"stack/seed{seed}/final.pt", weights_only=True)
        alone = torch.load(work_dir / f"alone/seed{seed}/final.pt", weights_only=True)
        diffs.append(max(float((stacked[k] - alone[k]).abs().max()) for k in stacked))
    return {
        "stack_vs_k1_max_abs_diff": max(diffs),
        "stack_vs_k1_setup": f"demo {spec.name}, {steps} steps of {spec.batch_size} x {spec.seq_len}, seeds {SEEDS}",
    }


def bench_forward_vs_bridge(architecture: str = "l4_h8", **overrides: Any) -> dict[str, Any]:
    """Logits of a stack of 4 refits at step 0 against each refit's TransformerBridge: the largest difference."""
    import torch

    from headstab.refits.models import build_model
    from headstab.training.model import StackedTransformer

    spec = demo_spec(architecture, **overrides)
    tokens = demo_tokens(spec, len(SEEDS))
    with torch.no_grad():
        stacked = StackedTransformer.from_seeds(spec, list(SEEDS))(tokens)
        diffs = [float((stacked[i] - build_model(spec, seed)(tokens[i])).abs().max()) for i, seed in enumerate(SEEDS)]
    return {"stack_forward_max_abs_diff": max(diffs), "stack_forward_max_abs_logit": float(stacked.abs().max())}


def bench_bf16_loss(work_dir: Path, steps: int = 96, **overrides: Any) -> dict[str, Any]:
    """4 refits trained in fp32 and in bf16 (one job each): the mean final loss's change in seed s.d."""
    import statistics

    spec = demo_spec("l2_h8_attn", n_tokens=None, checkpoint_every=steps, log_every=max(1, steps // 4), **overrides)
    shard = markov_shard(work_dir / "shard_000.npy", spec.d_vocab, steps * spec.tokens_per_step)
    losses = {}
    for precision in ("fp32", "bf16"):
        metas = train_job(spec, shard, work_dir / precision, SEEDS, precision=precision, attention="sdpa")
        losses[precision] = [meta["final_loss"] for meta in metas]
    squares = sum(sum((x - statistics.fmean(v)) ** 2 for x in v) for v in losses.values())
    sd = (squares / (2 * (len(SEEDS) - 1))) ** 0.5
    delta = statistics.fmean(losses["bf16"]) - statistics.fmean(losses["fp32"])
    return {
        "train_bf16_loss_delta_sd": abs(delta) / sd,
        "train_bf16_final_losses": losses,
        "train_bf16_setup": f"demo {spec.name}, {steps} steps of {spec.batch_size} x {spec.seq_len}, sdpa, "
        f"seeds {SEEDS}, Markov-chain tokens; the last log row's mean loss (the last {spec.log_every} steps)",
    }


def bench_training_model(
    work_dir: Path, steps: int = 10, repeats: int = 5, threads: int = 1, n_layers: int = 8, quick: bool = False
) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    logging.getLogger("headstab").setLevel(logging.WARNING)
    toy = {"batch_size": 2, "seq_len": 16} if quick else {}
    result = bench_ops(n_layers, **toy)
    times = {arch: bench_step_times(arch, steps, repeats, **toy) for arch in ARCHITECTURES}
    for arch, entry in times.items():
        for name, value in entry["speedup_vs_bridge"].items():
            result[f"training_model_{arch}_{name}_speedup"] = value
    seconds = times["l4_h8"]["seconds_per_step"]
    result["stack_cpu_speedup_k4"] = seconds["plain"] / seconds["plain_k4_per_seed"]
    result["training_model_step_seconds"] = times
    result |= bench_stack_equivalence(work_dir / "equivalence", steps=4 if quick else 24, **toy)
    result |= bench_forward_vs_bridge(**toy)
    result |= bench_bf16_loss(work_dir / "bf16", steps=4 if quick else 96, **toy)
    result["training_model_setup"] = (
        f"demo {', '.join(ARCHITECTURES)}, batch 8 x seq 128, Adam, CPU, torch threads {torch.get_num_threads()}; "
        f"{steps} steps per run, median of {repeats} alternating runs; plain_k4_per_seed: the k = 4 stack's step / 4"
    )
    result["machine"] = common.machine_note()
    result["load_average"] = common.load_average()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 steps, 1 repeat, 2 layers (smoke test)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    options = {"steps": 2, "repeats": 1, "n_layers": 2, "quick": True} if args.quick else {}
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        results = bench_training_model(work_dir, threads=args.threads, **options)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
