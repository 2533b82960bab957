"""The plain training model (`headstab.training.model.StackedTransformer`) against the TransformerBridge it replaces.

Two measurements, side by side in one process:
- ops per training step: every aten operator that one forward and backward pass dispatches (a
  TorchDispatchMode counter; `kernels` leaves out the views, which launch nothing), for the bridge
  (`model(tokens, return_type="loss")`, then `.backward()`, as `headstab.training.loop.train_step`)
  and the plain model (`model.backward(model.loss(tokens))`) at k = 1 and k = 4, on an 8-layer demo-shaped
  model (d_model 64, 8 heads of 8, d_mlp 256, d_vocab 1024). `plain_vs_bridge_ops_per_step` is plain / bridge.
- seconds per training step (forward, backward, Adam step, as the training loop runs them) of the bridge,
  the plain model at k = 1 and at k = 4 per seed (its step time / 4), each with materialised attention and
  with sdpa, for the demo's l2_h8_attn and l4_h8 (batch 8 x seq 128), on `--threads` torch threads
  (default 1). Variants alternate within each repeat; medians over repeats of `steps` steps each.

Run alone: `python benchmarks/bench_training_model.py [--quick] [--threads N]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
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
    return dataclasses.replace(spec, **overrides)


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
    setups = {"bridge": (bridge_setup(spec, 1), tokens[:1]), "plain": (plain_setup(spec, (1,)), tokens[:1]),
              "plain_k4": (plain_setup(spec, SEEDS), tokens)}  # fmt: skip
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


def bench_training_model(steps: int = 10, repeats: int = 5, threads: int = 1, n_layers: int = 8) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    logging.getLogger("headstab").setLevel(logging.WARNING)
    result = bench_ops(n_layers)
    times = {arch: bench_step_times(arch, steps, repeats) for arch in ARCHITECTURES}
    for arch, entry in times.items():
        for name, value in entry["speedup_vs_bridge"].items():
            result[f"training_model_{arch}_{name}_speedup"] = value
    result["training_model_step_seconds"] = times
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
    options = {"steps": 2, "repeats": 1, "n_layers": 2} if args.quick else {}
    results = bench_training_model(threads=args.threads, **options)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
