"""The cost of neuron universality: the streamed statistics' update and the rotation null, per refit pair.

Measurements (one process, float16 chunks of random activations, GELU-like, medians over repeats):
- `neuron_update_tokens_per_s_tiny_{same,cross}_layer`: `PairStatistics.update` for the suite's tiny
  architecture (2 layers, d_mlp 32), chunks of 4,096 tokens;
- `neuron_update_tokens_per_s_gpt2_layer`: one GPT-2-small-sized layer (d_mlp 3072), same-layer scope, chunks of
  1,024 tokens; a GPT-2 small pair streams at this rate / 12 (the cross-layer scope's cross-covariance costs
  12 times the same-layer one's);
- `neuron_null_seconds_per_gpt2_layer_draw`: one Haar rotation of d 3072 (QR), its (C M^T) and diag(M Sigma M^T),
  the same-layer null's cost per layer and draw (K = 20 draws of 12 layers: 240 times it);
- `neuron_accumulator_gb_gpt2_small_{same,cross}_layer`: `accumulator_bytes` of GPT-2 small (12 x 3072);
- `neuron_stream_tokens_per_s_demo_pair`: the rule's whole stream for one refit pair of the demo's l2_h8 (2 layers,
  d_mlp 256, cross-layer): both models' forward passes on 8 windows of 128 tokens a batch and the update.

    python benchmarks/bench_neurons.py [--quick] [--device cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from headstab.neurons.rotations import haar_rotation  # noqa: E402
from headstab.neurons.streamed import PairStatistics, accumulator_bytes  # noqa: E402
from headstab.neurons.universality import rotated_correlation  # noqa: E402


def _synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def update_rate(n_layers: int, d_mlp: int, scope: str, chunk: int, chunks: int, device: str) -> float:
    """Tokens per second of PairStatistics.update on float16 chunks already on `device`."""
    rng = np.random.default_rng(0)
    a = torch.as_tensor(rng.normal(size=(chunk, n_layers, d_mlp)).astype(np.float16), device=device)
    b = torch.as_tensor(rng.normal(size=(chunk, n_layers, d_mlp)).astype(np.float16), device=device)
    stats = PairStatistics.empty("a", "b", n_layers, d_mlp, scope, device)
    stats.update(a, b)  # warm-up: allocations, BLAS threads
    _synchronise(device)
    start = time.perf_counter()
    for _ in range(chunks):
        stats.update(a, b)
    _synchronise(device)
    return chunk * chunks / (time.perf_counter() - start)


def null_seconds(d_mlp: int, device: str) -> float:
    """Seconds of one Haar draw of one layer and the rotated correlations of its d_mlp anchor neurons."""
    generator = torch.Generator(device=device).manual_seed(0)
    sigma = torch.eye(d_mlp, dtype=torch.float64, device=device)
    cross = torch.randn(d_mlp, d_mlp, dtype=torch.float64, device=device, generator=generator)
    variance = torch.ones(d_mlp, dtype=torch.float64, device=device)
    _synchronise(device)
    start = time.perf_counter()
    rotation = haar_rotation((d_mlp,), generator)
    rotated_correlation(cross, variance, sigma, rotation).amax(dim=-1)
    _synchronise(device)
    return time.perf_counter() - start


def demo_stream_rate(batches: int, device: str) -> float:
    """Tokens per second of `stream_all_pairs` for two untrained refits of the demo's l2_h8, cross-layer."""
    from headstab.neurons.capture import stream_all_pairs
    from headstab.plan.config import architecture_spec, load_config
    from headstab.refits.models import build_model

    spec = architecture_spec(load_config(common.REPO / "config/demo.yaml"), "l2_h8")
    models = {str(seed): build_model(spec, seed).to(device) for seed in (1, 2)}
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, spec.d_vocab, size=(8, spec.seq_len)) for _ in range(batches + 1)]
    stream_all_pairs(models, windows[:1], "cross_layer", device)  # warm-up
    _synchronise(device)
    start = time.perf_counter()
    stream_all_pairs(models, windows[1:], "cross_layer", device)
    _synchronise(device)
    return batches * 8 * spec.seq_len / (time.perf_counter() - start)


def bench_neurons(quick: bool = False, device: str = "cpu") -> dict:
    """Every measurement of the module docstring (quick: fewer chunks, a d_mlp of 768 for the GPT-2 rows)."""
    d_gpt2 = 768 if quick else 3072
    repeats = 1 if quick else 3
    return {
        "neuron_update_tokens_per_s_tiny_same_layer": update_rate(2, 32, "same_layer", 4096, 20, device),
        "neuron_update_tokens_per_s_tiny_cross_layer": update_rate(2, 32, "cross_layer", 4096, 20, device),
        "neuron_update_tokens_per_s_gpt2_layer": float(
            np.median([update_rate(1, d_gpt2, "same_layer", 1024, 2, device) for _ in range(repeats)])
        ),
        "neuron_null_seconds_per_gpt2_layer_draw": float(
            np.median([null_seconds(d_gpt2, device) for _ in range(repeats)])
        ),
        "neuron_stream_tokens_per_s_demo_pair": demo_stream_rate(2 if quick else 16, device),
        "neuron_accumulator_gb_gpt2_small_same_layer": accumulator_bytes(12, 3072, "same_layer") / 1e9,
        "neuron_accumulator_gb_gpt2_small_cross_layer": accumulator_bytes(12, 3072, "cross_layer") / 1e9,
        "d_mlp_gpt2_rows": d_gpt2,
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "load_average": common.load_average(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer chunks and a d_mlp of 768 for the GPT-2 rows")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (a spinning second thread slows small chunks)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps(bench_neurons(args.quick, args.device), indent=1))


if __name__ == "__main__":
    main()
