"""`drop_swap_seconds_per_refit`: every layer drop and adjacent swap of one refit, beside one intact pass.

The paper's l8_h8 (config/config.yaml: 8 layers of 8 heads, d_model 512, d_mlp 2048, n_ctx 1024, d_vocab
48,262) at its seeded random initialisation, on 16,384 held-out tokens (16 windows of n_ctx), CPU.
`headstab.layer_surgery.drop_swap_counts` (the intact pass, 8 drops, 7 swaps: what rule layer_drop_swap
runs per refit) and `headstab.evaluation.summed_token_loss` (one intact pass) over the same windows and
batch size, alternated, medians of the repeats; `drop_swap_vs_intact` is their ratio. In a child process,
model construction outside the clock.

`drop_swap_flop_ratio` is the same ratio in multiply-adds per token (`flop_ratio`): the intact pass, the
L(L - 1) block passes `drop_swap_counts` runs and one unembedding per condition. `drop_swap_vs_flops` is the
measured ratio over it: near 1 when the conditions run as fast per multiply-add as the intact pass.

    python benchmarks/bench_drop_swap.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ARCHITECTURE = "l8_h8"


def flop_ratio(spec: Any, seq_len: int) -> float:
    """(intact pass + every condition) / intact pass, in multiply-adds per token of a seq_len window."""
    n_layers = spec.n_layers
    # a block's weight matrices, then the scores and the weighted sum over (at most) seq_len keys
    block = spec.n_params / n_layers + 2 * seq_len * spec.n_heads * spec.d_head
    unembed = spec.d_model * spec.d_vocab
    intact = n_layers * block + unembed
    return (intact + n_layers * (n_layers - 1) * block + (2 * n_layers - 1) * unembed) / intact


def job(n_tokens: int, batch_size: int, repeats: int, threads: int) -> dict[str, float]:
    import torch

    from headstab.evaluation import summed_token_loss
    from headstab.layer_surgery import drop_swap_counts
    from headstab.plan.config import architecture_spec, load_config
    from headstab.refits.models import build_model

    torch.set_num_threads(threads)
    spec = architecture_spec(load_config(common.REPO / "config/config.yaml"), ARCHITECTURE)
    model = build_model(spec, seed=1).eval()
    seq_len = spec.seq_len or spec.n_ctx
    rng = np.random.default_rng(0)
    windows = rng.integers(0, spec.d_vocab, size=(max(n_tokens // seq_len, 1), seq_len))
    lengths = np.full(len(windows), seq_len)
    intact, surgery = [], []
    for _ in range(repeats):  # alternated, so a change of machine load hits both
        start = time.perf_counter()
        summed_token_loss(model, windows, lengths, batch_size=batch_size)
        intact.append(time.perf_counter() - start)
        start = time.perf_counter()
        drop_swap_counts(model, windows, batch_size=batch_size)
        surgery.append(time.perf_counter() - start)
    ratio = statistics.median(surgery) / statistics.median(intact)
    arithmetic = flop_ratio(spec, seq_len)
    return {
        "drop_swap_seconds_per_refit": statistics.median(surgery),
        "intact_pass_seconds": statistics.median(intact),
        "drop_swap_vs_intact": ratio,
        "drop_swap_flop_ratio": arithmetic,
        "drop_swap_vs_flops": ratio / arithmetic,
        "drop_swap_runs": surgery,
        "intact_runs": intact,
        "n_tokens": int(windows.size),
    }


def bench_drop_swap(n_tokens: int = 16384, batch_size: int = 4, repeats: int = 2, threads: int = 2) -> dict:
    args = ["--job", str(n_tokens), str(batch_size), str(repeats), str(threads)]
    result, peak_gb = common.run_json_child(Path(__file__).resolve(), args, timeout=3600)
    return {
        **result,
        "drop_swap_peak_rss_gb": peak_gb,
        "drop_swap_setup": f"{ARCHITECTURE} (config/config.yaml) at random init, {n_tokens} held-out tokens in windows "
        f"of n_ctx, batch {batch_size}, {threads} torch threads, CPU; 8 drops + 7 swaps from one intact pass "
        "(headstab.layer_surgery.drop_swap_counts) vs one intact pass (headstab.evaluation.summed_token_loss)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--job", nargs=4, type=int, metavar=("TOKENS", "BATCH", "REPEATS", "THREADS"), help="child")
    args = parser.parse_args()
    if args.job:
        print(json.dumps(job(*args.job)))
        return
    print(json.dumps(bench_drop_swap(**({"n_tokens": 2048, "repeats": 1} if args.quick else {})), indent=2))


if __name__ == "__main__":
    main()
