"""Similarity engine benchmarks: against the paper's plain loop, and against the GEMM limit.

1. `bench_agreement`: `pair_similarity_from_caches` (the engine the workflow runs, both scopes) on
   caches of synthetic l8_h16 refits written by headstab's writer, against tests/helpers/reference.py's
   `loop_pair_similarity` (the paper's method as a plain Python loop) on the patterns read back, one
   anchor: `similarity_max_abs_diff`.
2. `bench_streaming`: all anchors, all pairs, same layer, streamed from HDF5 caches on disk (written
   by headstab's own cache writer) with `pair_similarity_from_caches(..., scope="same_layer")`, for
   5, 10, 20 and 50 refits of l8_h16 with 100 prompts of 96 tokens. Each count runs in a fresh child
   process, which gives its wall time and its own peak RSS (os.wait4).
3. `bench_checksum_overhead`: the pair_similarity stage's computation (`pair_similarity_from_caches`,
   the workflow's cross_layer scope; same_layer on request) for 50 refits of l8_h16 on caches with and
   without fletcher32 checksums, side by side: what verifying every read costs.

Useful flops of the same-layer computation (stated in the summary): the symmetric Gram of each
layer needs rows^2 * features multiply-adds halved by symmetry, i.e.
    useful_flops = n_layers * (n_refits * n_heads)^2 * sum over prompts of length(length+1)/2
(2 flops per multiply-add x 1/2 for symmetry). The GEMM fraction divides the achieved useful rate
by this machine's float32 GEMM rate measured in the same process right before and right after the
computation (the fastest of numpy and torch, before and after).

Run alone: `python benchmarks/bench_similarity.py [--quick]`; `--stream-worker` is the child entry.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

log = logging.getLogger("benchmarks.similarity")


def useful_flops(n_layers: int, n_refits: int, n_heads: int, lengths: np.ndarray) -> float:
    """rows^2 * features per layer of the symmetric same-layer Gram (see the module docstring)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    return float(n_layers * (n_refits * n_heads) ** 2 * np.sum(lengths * (lengths + 1) / 2))


# ---------------------------------------------------------------- 1. engine vs the plain loop
def bench_agreement(
    work_dir: Path, n_refits: int = 4, n_prompts: int = 6, n_pos: int = 48, anchor: int = 0
) -> dict[str, Any]:
    """Largest difference between the engine (both scopes) and the plain loop, one anchor against every
    refit, every layer and head; the loop's time is reported, not compared (it is the oracle)."""
    from helpers.reference import loop_pair_similarity

    from headstab.activations.reader import open_cache
    from headstab.similarity.pairs import pair_similarity_from_caches

    shape = common.L8_H16
    paths = common.write_synthetic_caches(
        work_dir / "agreement", n_refits, shape["n_layers"], shape["n_heads"], n_prompts, n_pos
    )
    patterns = []
    for path in paths:
        with open_cache(path) as cache:
            patterns.append(cache.hook_pattern("primary"))
            lengths = cache.lengths("primary")
    loop_s, loop = common.timed(lambda: loop_pair_similarity(patterns, lengths, anchors=[anchor]))
    cross = pair_similarity_from_caches(paths, "primary", progress=False, scope="cross_layer")[anchor]
    same = pair_similarity_from_caches(paths, "primary", progress=False, scope="same_layer")[anchor]
    loop_same = np.stack([loop[0][:, layer, :, layer, :] for layer in range(shape["n_layers"])], axis=1)
    diffs = {"cross_layer": float(np.abs(cross - loop[0]).max()), "same_layer": float(np.abs(same - loop_same).max())}
    return {
        "similarity_max_abs_diff": max(diffs.values()),
        "similarity_max_abs_diff_by_scope": diffs,
        "similarity_loop_seconds": loop_s,
        "similarity_agreement_setup": (
            f"pair_similarity_from_caches (both scopes) vs tests/helpers/reference.py loop_pair_similarity (float64), anchor "
            f"refit {anchor + 1} against all {n_refits} refits of synthetic l8_h16, {n_prompts} prompts x {n_pos} tokens, "
            "caches written by headstab's writer"
        ),
    }


# ---------------------------------------------------------------- 2. streamed from HDF5, all pairs
def stream_worker(
    cache_paths: list[str], promptset: str, prompt_chunk: int, scope: str = "same_layer", gemm_rate: bool = True
) -> dict[str, Any]:
    """Child-process body: the timed computation over the given caches (GEMM rate before and after when asked)."""
    import torch  # noqa: F401  (the engine's GEMM backend: a one-off import, kept out of the clock)

    from headstab.activations.reader import CacheReader, open_cache
    from headstab.similarity.pairs import pair_similarity_from_caches

    read_seconds = _time_pattern_reads(CacheReader)

    with open_cache(cache_paths[0]) as cache:
        n_layers, n_heads = cache.n_layers, cache.n_heads
        lengths = cache.lengths(promptset)
    # The GEMM rate right before and right after, in this process: this machine's speed drifts by
    # +-25% over minutes (shared host), and the fraction should compare like with like.
    no_rate = {"best_gflops": float("nan")}
    before = common.matmul_rate(repeats=3) if gemm_rate else no_rate
    start = time.perf_counter()
    similarity = pair_similarity_from_caches(cache_paths, promptset, prompt_chunk=prompt_chunk, progress=False,
                                             scope=scope)  # fmt: skip
    seconds = time.perf_counter() - start
    after = common.matmul_rate(repeats=3) if gemm_rate else no_rate
    diagonal = np.einsum("aalhh->", similarity) if scope == "same_layer" else np.einsum("aalhlh->", similarity)
    return {
        "seconds": seconds,
        "read_seconds": read_seconds[0],
        "gemm_gflops_before_after": [before["best_gflops"], after["best_gflops"]],
        "gemm_gflops": max(before["best_gflops"], after["best_gflops"]),
        "useful_flops": useful_flops(n_layers, len(cache_paths), n_heads, lengths),
        "shape": list(similarity.shape),
        "self_similarity_mean": float(diagonal / (len(cache_paths) * n_layers * n_heads)),
    }


def _time_pattern_reads(reader_class: Any) -> list[float]:
    """Adds up, in the returned one-element list, the time the engine spends reading hook_pattern (checksums included)."""
    total, read = [0.0], reader_class.hook_pattern_lower

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return read(self, *args, **kwargs)
        finally:
            total[0] += time.perf_counter() - start

    reader_class.hook_pattern_lower = timed  # this child process only
    return total


def _run_child(args: list[str], timeout: float) -> tuple[dict[str, Any], float]:
    return common.run_json_child(Path(__file__).resolve(), args, timeout)


def bench_streaming(
    work_dir: Path,
    refit_counts: tuple[int, ...] = (5, 10, 20, 50),
    n_prompts: int = 100,
    n_pos: int = 96,
    series_prompts: int = 20,
    n_distinct: int = 4,
    prompt_chunk: int = 10,
    matmul: dict[str, float] | None = None,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """Same-layer all-pairs similarity streamed from HDF5 caches written as the workflow writes them
    (packed lower-triangle patterns, uncompressed, fletcher32 on every chunk; the writer's default gzip
    applies only to the per-token datasets, which the engine does not read).

    Headline: the largest refit count with `n_prompts` prompts. Scaling series (every count): caches
    of the first `series_prompts` prompts (the exponent is about refits; fewer prompts keep
    `make bench` inside 15 minutes).
    """
    import os

    shape = common.L8_H16
    largest = max(refit_counts)
    write = {}
    paths = {}
    for kind, prompts in (("default", n_prompts), ("series", series_prompts)):
        write[kind], paths[kind] = common.timed(lambda: common.write_synthetic_caches(
            work_dir / f"caches_{kind}", largest, shape["n_layers"], shape["n_heads"], prompts, n_pos,
            n_distinct=n_distinct,
        ))  # fmt: skip
        log.info("wrote %d %s synthetic caches (%d distinct) in %.1f s", largest, kind, n_distinct, write[kind])
    # Flush the freshly written files now: otherwise the kernel writes them back during the timed runs.
    os.sync()
    matmul = matmul or common.matmul_rate()

    def run(kind: str, count: int) -> dict[str, Any]:
        args = ["--stream-worker", "--promptset", "primary", "--prompt-chunk", str(prompt_chunk),
                *map(str, paths[kind][:count])]  # fmt: skip
        result, peak_gb = _run_child(args, timeout)
        result["peak_rss_gb"] = peak_gb
        # Against the faster of the GEMM rates measured right before and after this computation.
        result["gemm_fraction"] = result["useful_flops"] / result["seconds"] / 1e9 / result["gemm_gflops"]
        log.info("same-layer similarity, %d refits, %s caches: %.1f s, peak RSS %.2f GB, GEMM fraction %.2f",
                 count, kind, result["seconds"], peak_gb, result["gemm_fraction"])  # fmt: skip
        return result

    series = {count: run("series", count) for count in sorted(refit_counts)}
    top = run("default", largest)
    counts = np.array(sorted(series), dtype=np.float64)
    seconds = np.array([series[int(c)]["seconds"] for c in counts])
    exponent = float(np.polyfit(np.log(counts), np.log(seconds), 1)[0]) if len(counts) > 1 else math.nan
    return {
        "similarity_gemm_fraction": top["gemm_fraction"],
        f"similarity_{largest}_refits_seconds": top["seconds"],
        "similarity_peak_rss_gb": top["peak_rss_gb"],
        "similarity_scaling_exponent": exponent,
        "similarity_useful_gflops": top["useful_flops"] / top["seconds"] / 1e9,
        "similarity_gemm_gflops_before_after": top["gemm_gflops_before_after"],
        "similarity_series_prompts": series_prompts,
        "similarity_seconds_by_refits_series": {str(c): series[c]["seconds"] for c in sorted(series)},
        "similarity_gemm_fraction_by_refits_series": {str(c): series[c]["gemm_fraction"] for c in sorted(series)},
        "similarity_peak_rss_gb_by_refits_series": {str(c): series[c]["peak_rss_gb"] for c in sorted(series)},
        "similarity_self_similarity_mean": top["self_similarity_mean"],
        "similarity_cache_write_seconds": write,
        "similarity_streaming_setup": (
            f"l8_h16, {n_prompts} prompts x {n_pos} tokens, all anchors x all pairs, same layer, "
            f"pair_similarity_from_caches(scope='same_layer', prompt_chunk={prompt_chunk}) on HDF5 caches written "
            f"by headstab.activations.writer.write_activation_cache (float32, defaults: packed patterns, fletcher32); scaling "
            f"series on caches of {series_prompts} prompts; {n_distinct} distinct caches per kind, the other "
            f"refits symlinks to them (every file is still opened and its patterns read in full)"
        ),
        "similarity_useful_flops_definition": (
            "n_layers * (n_refits * n_heads)^2 * sum_p length_p (length_p + 1) / 2  (symmetric Gram: "
            "2 flops per multiply-add, halved by symmetry); fraction = useful_flops / seconds / the faster of the "
            "best float32 GEMM rates (numpy or torch, 3072^3) measured in the same process right before and right after"
        ),
        "matmul": matmul,
    }


# ---------------------------------------------------------------- 3. what the checksums cost
def bench_checksum_overhead(
    work_dir: Path,
    n_refits: int = 50,
    n_prompts: int = 20,
    n_pos: int = 96,
    n_distinct: int = 4,
    prompt_chunk: int = 10,
    repeats: int = 4,
    scopes: tuple[str, ...] = ("cross_layer",),
    timeout: float = 900.0,
) -> dict[str, Any]:
    """`pair_similarity_from_caches` over caches with and without fletcher32, alternating, medians.

    `similarity_checksum_overhead` is the workflow's scope (cross_layer: its Gram grows with refits
    squared, its reads with refits); `scopes` may add same_layer, the read-heaviest case. `n_prompts`
    keeps a cache (47.6 MB of patterns at 20) larger than the CPU caches, as real ones are: the
    checksum costs more per byte read from memory. Each child also reports the seconds it spent
    reading patterns, the low-noise part of the difference (the Gram's time drifts with the machine).
    """
    import os

    shape = common.L8_H16
    paths = {
        checksum: common.write_synthetic_caches(
            work_dir / f"caches_checksum_{checksum}", n_refits, shape["n_layers"], shape["n_heads"], n_prompts, n_pos,
            n_distinct=n_distinct, checksum=checksum,
        )
        for checksum in (True, False)
    }  # fmt: skip
    os.sync()
    runs: dict[str, dict[bool, list[dict[str, Any]]]] = {scope: {True: [], False: []} for scope in scopes}
    log.info("similarity of %d refits with and without checksums, %d rounds", n_refits, repeats)
    for round_ in range(repeats):  # alternate, first with then without, then the other way: drift hits both alike
        for scope in scopes:
            for checksum in (True, False) if round_ % 2 == 0 else (False, True):
                args = ["--stream-worker", "--no-gemm-rate", "--scope", scope, "--prompt-chunk", str(prompt_chunk),
                        *map(str, paths[checksum])]  # fmt: skip
                runs[scope][checksum].append(_run_child(args, timeout)[0])

    def median(scope: str, checksum: bool, key: str) -> float:
        return float(np.median([run[key] for run in runs[scope][checksum]]))

    overhead = {scope: median(scope, True, "seconds") / median(scope, False, "seconds") - 1 for scope in scopes}
    reads = {scope: (median(scope, True, "read_seconds") - median(scope, False, "read_seconds")) / median(scope, False, "seconds")
             for scope in scopes}  # fmt: skip
    log.info(
        "checksum overhead of the similarity: %s (from the reads alone: %s)",
        {scope: round(value, 3) for scope, value in overhead.items()},
        {s: round(v, 3) for s, v in reads.items()},
    )
    return {
        "similarity_checksum_overhead": overhead[scopes[0]],
        **{f"similarity_checksum_overhead_{scope}": overhead[scope] for scope in scopes},
        **{f"similarity_checksum_overhead_from_reads_{scope}": reads[scope] for scope in scopes},
        "similarity_checksum_seconds": {
            scope: {
                ("with" if checksum else "without"): {
                    key: [run[key] for run in results] for key in ("seconds", "read_seconds")
                }
                for checksum, results in by.items()
            }
            for scope, by in runs.items()
        },  # fmt: skip
        "similarity_checksum_setup": (
            f"pair_similarity_from_caches(scope=..., prompt_chunk={prompt_chunk}) over {n_refits} refits of l8_h16, "
            f"{n_prompts} prompts x {n_pos} tokens, caches written by write_activation_cache with and without "
            f"fletcher32 ({n_distinct} distinct caches each, the other refits symlinks), one child process per run, "
            f"runs alternating (ABBA), medians of {repeats}; _from_reads_: (median read seconds with - without) / median "
            f"seconds without"
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream-worker", action="store_true", help="child: time one streamed computation")
    parser.add_argument("--scope", default="same_layer", help="child: cross_layer or same_layer")
    parser.add_argument("--no-gemm-rate", action="store_true", help="child: skip the GEMM rate before and after")
    parser.add_argument("--promptset", default="primary")
    parser.add_argument("--prompt-chunk", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    parser.add_argument("caches", nargs="*")
    args = parser.parse_args(argv)
    if args.stream_worker:
        print(
            json.dumps(
                stream_worker(
                    args.caches, args.promptset, args.prompt_chunk, args.scope, gemm_rate=not args.no_gemm_rate
                )
            )
        )
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        results = (
            bench_agreement(work_dir, n_refits=3, n_prompts=2, n_pos=8) if args.quick else bench_agreement(work_dir)
        )
        if args.quick:
            results |= bench_streaming(
                work_dir, refit_counts=(2, 3), n_prompts=4, n_pos=12, series_prompts=2, n_distinct=2
            )
            results |= bench_checksum_overhead(work_dir, n_refits=3, n_prompts=4, n_pos=12, n_distinct=2, repeats=1)
        else:
            results |= bench_streaming(work_dir)
            results |= bench_checksum_overhead(work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
