"""`bootstrap_seconds`: the multi-bootstrap of one architecture's prompt set at the paper's scale.

Synthetic prompt-group similarity tensors of the paper's largest shape (50 refits of l8_h16, 20 prompt
groups): observed and null, [group, seed_a, seed_b, layer, head_a, head_b] float32, plus a cross-layer
pair-similarity tensor; `interval_tables` (1,000 resamples of refits and prompt groups, head, layer,
pooled and gap tables) timed in a fresh child process, imports and data generation outside the clock.
Peak RSS is the child's. `bootstrap_one_to_one_seconds`: the part spent on one-to-one stability (the
assignments of observed and null, and their replicates), measured inside the same run.

    python benchmarks/bench_bootstrap.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def job(n_refits: int, n_groups: int, n_boot: int) -> dict[str, float]:
    import headstab.statistics.interval_tables as tables
    from headstab.similarity.prompt_groups import GroupedSimilarity

    n_layers, n_heads = common.L8_H16["n_layers"], common.L8_H16["n_heads"]
    rng = np.random.default_rng(0)
    shape = (n_groups, n_refits, n_refits, n_layers, n_heads, n_heads)
    observed = rng.random(shape, dtype=np.float32)
    observed = (observed + observed.transpose(0, 2, 1, 3, 5, 4)) / 2
    sizes = np.full(n_groups, 5)
    cross = rng.random((n_refits, n_refits, n_layers, n_heads, n_layers, n_heads), dtype=np.float32)
    # Same-layer blocks of the pair tensor = the group mean, as the workflow's consistency check requires.
    mean = np.tensordot(sizes / sizes.sum(), observed.astype(np.float64), axes=1).astype(np.float32)
    for layer in range(n_layers):
        cross[:, :, layer, :, layer, :] = mean[:, :, layer]
    lengths = np.full(n_groups * 5, 20)
    grouped = GroupedSimilarity(
        observed, observed * 0.5, sizes, list(range(n_refits)), np.roll(np.arange(lengths.size), 1), lengths
    )
    start = time.perf_counter()
    with (
        common.TimedCalls(tables, "one_to_one_assignment") as assignment,
        common.TimedCalls(tables, "one_to_one_replicates") as replicates,
    ):
        tables.interval_tables(cross, grouped, "primary", n_boot=n_boot, seed=0, confidence=0.95)
    return {
        "bootstrap_seconds": time.perf_counter() - start,
        "bootstrap_one_to_one_seconds": assignment.seconds + replicates.seconds,
    }


def bench_bootstrap(n_refits: int = 50, n_groups: int = 20, n_boot: int = 1000) -> dict[str, float]:
    args = ["--job", str(n_refits), str(n_groups), str(n_boot)]
    result, peak_gb = common.run_json_child(Path(__file__).resolve(), args, timeout=1800)
    return {
        **result,
        "bootstrap_peak_rss_gb": peak_gb,
        "bootstrap_setup": f"{n_refits} refits of l8_h16, {n_groups} prompt groups, {n_boot} resamples; observed, "
        "null and cross-layer replicates and every interval table (headstab.statistics.interval_tables.interval_tables)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--job", nargs=3, type=int, metavar=("REFITS", "GROUPS", "BOOT"), help="child")
    args = parser.parse_args()
    if args.job:
        print(json.dumps(job(*args.job)))
        return
    print(json.dumps(bench_bootstrap(**({"n_refits": 4, "n_groups": 3, "n_boot": 20} if args.quick else {})), indent=2))


if __name__ == "__main__":
    main()
