"""Run every benchmark in one process run and write results/bench/summary.json.

    python benchmarks/run_all.py              # what `make bench` runs (< 15 min on 2 cores)
    python benchmarks/run_all.py --quick      # toy sizes, a minute: checks the code paths only
    python benchmarks/run_all.py --demo       # also time the whole `make demo` DAG from scratch
    python benchmarks/run_all.py --device cuda --only train
    python benchmarks/run_all.py --only train_gpu   # the GPU stage alone (skipped without CUDA)

Ratios are measured side by side in this one run on this machine; absolute times depend on the
machine and its load (the load average is recorded at start and end). The summary holds the keys
at the top level, `targets` with each key's target and whether this run met it, and `details` with
every raw timing behind them. What each key measures: benchmarks/README.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars are noise in a benchmark log

import argparse
import json
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

log = logging.getLogger("benchmarks")

# key -> (comparison, target); None for reported-only keys.
TARGETS: dict[str, tuple[str, float] | None] = {
    "similarity_max_abs_diff": ("<=", 1e-5),
    "similarity_gemm_fraction": (">=", 0.5),
    "similarity_50_refits_seconds": None,
    "similarity_peak_rss_gb": ("<=", 8.0),
    "similarity_scaling_exponent": ("<=", 2.1),
    "similarity_checksum_overhead": ("<=", 0.10),
    "cache_overhead": ("<=", 1.5),
    "cache_max_abs_diff": ("<=", 1e-6),
    "cache_checksum_overhead": ("<=", 0.10),
    "cache_published_l8_h16_seconds": None,
    "cache_published_l8_h16_mb": None,
    "paper_scale_analysis_seconds": ("<=", 300.0),
    "paper_scale_one_to_one_fraction": ("<=", 0.10),
    "bootstrap_seconds": ("<=", 60.0),
    "bootstrap_one_to_one_seconds": None,
    "bootstrap_peak_rss_gb": None,
    "train_vs_transformer_lens": (">=", 0.95),
    "demo_wall_seconds": ("<=", 900.0),
    "drop_swap_seconds_per_refit": None,
    "drop_swap_vs_intact": ("<=", 10.0),
    "drop_swap_flop_ratio": None,
    "drop_swap_vs_flops": ("<=", 1.15),
    # the training model and loop on the CPU (bench_training_model.py)
    "stack_vs_k1_max_abs_diff": ("<=", 0.0),
    "stack_forward_max_abs_diff": ("<=", 1e-5),
    "plain_vs_bridge_ops_per_step": ("<=", 1.0),
    "stack_cpu_speedup_k4": None,
    "train_bf16_loss_delta_sd": ("<=", 1.0),
    # the GPU stage (bench_train_gpu.py): only where CUDA is present
    "train_gpu_mfu": None,
    "train_tf32_speedup": (">=", 1.0),
    "train_bf16_sdpa_speedup": (">=", 1.0),
    "train_stack_speedup_k2": (">=", 1.0),
    "train_stack_speedup_k4": (">=", 1.0),
    "train_stack_speedup_k8": (">=", 1.0),
    "train_compile_speedup": (">=", 1.0),
    "train_compile_seconds": None,
    "train_gpu_peak_mem_gb": None,
    "train_gpu_syncs_per_step": ("<=", 0.0),
    "head_types_seconds_per_refit": None,
    "head_types_vs_cache": ("<=", 1.0),
    "job_startup_seconds": None,
    # MLP neurons (bench_neurons.py), one CPU thread: cost per refit pair, reported only
    "neuron_stream_tokens_per_s_demo_pair": None,
    "neuron_update_tokens_per_s_tiny_cross_layer": None,
    "neuron_update_tokens_per_s_gpt2_layer": None,
    "neuron_null_seconds_per_gpt2_layer_draw": None,
    "neuron_accumulator_gb_gpt2_small_cross_layer": None,
}
STAGES = (
    "similarity",
    "cache",
    "paper_scale",
    "bootstrap",
    "train",
    "drop_swap",
    "head_types",
    "training_model",
    "train_gpu",
    "job_startup",
    "neurons",
)


def run_demo(work_dir: Path, cores: str = "all") -> dict[str, Any]:
    """The whole demo DAG from scratch into a temporary results_dir, timed."""
    results_dir = work_dir / "demo_results"
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--cores",
        cores,
        "--scheduler",
        "greedy",  # as `make demo`
        "--configfile",
        "config/demo.yaml",
        "--config",
        f"results_dir={results_dir}",
    ]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    log_path = work_dir / "demo.log"
    start = time.perf_counter()
    with open(log_path, "w") as handle:
        code = subprocess.call(command, cwd=common.REPO, stdout=handle, stderr=subprocess.STDOUT, env=env)
    seconds = time.perf_counter() - start
    if code != 0:
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"`{' '.join(command)}` failed with exit code {code}; last lines of its log:\n{tail}")
    return {"demo_wall_seconds": seconds, "demo_command": " ".join(command)}


def check_targets(summary: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, target in TARGETS.items():
        value = summary.get(key)
        if target is None:
            continue
        comparison, bound = target
        met = None
        if isinstance(value, (int, float)) and not math.isnan(value):
            met = value >= bound if comparison == ">=" else value <= bound
        out[key] = {"target": f"{comparison} {bound:g}", "met": met}
    return out


def format_table(summary: dict[str, Any]) -> str:
    rows = [("key", "value", "target", "met")]
    for key in TARGETS:
        value = summary.get(key)
        shown = "null" if value is None else (f"{value:.3g}" if isinstance(value, float) else str(value))
        check = summary["targets"].get(key, {})
        met = {True: "yes", False: "NO", None: "-"}[check.get("met")]
        rows.append((key, shown, check.get("target", "(reported)"), met))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="toy sizes: checks that every benchmark runs")
    parser.add_argument("--demo", action="store_true", help="also time `make demo` from scratch (about 15 min)")
    parser.add_argument("--only", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    parser.add_argument("--device", default="cpu", help="torch device of the training benchmark")
    parser.add_argument("--train-threads", type=int, default=1, help="torch CPU threads of both training loops")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="summary file (default results/bench/summary.json; summary_quick.json with --quick)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.out is None:
        args.out = common.REPO / "results" / "bench" / ("summary_quick.json" if args.quick else "summary.json")
    stages = [stage.strip() for stage in args.only.split(",") if stage.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        parser.error(f"unknown stages {unknown}; choose from {list(STAGES)}")

    import bench_bootstrap
    import bench_cache
    import bench_cache_published
    import bench_drop_swap
    import bench_head_types
    import bench_job_startup
    import bench_neurons
    import bench_paper_scale
    import bench_similarity
    import bench_train
    import bench_train_gpu
    import bench_training_model

    start = time.perf_counter()
    summary: dict[str, Any] = {key: None for key in TARGETS}
    details: dict[str, Any] = {"machine": common.machine_note(), "load_average_start": common.load_average()}
    notes: list[str] = []
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        if "similarity" in stages:
            log.info("similarity: engine vs plain loop")
            loop = (
                bench_similarity.bench_agreement(work_dir, n_refits=3, n_prompts=2, n_pos=8)
                if args.quick
                else bench_similarity.bench_agreement(work_dir)
            )
            matmul = common.matmul_rate(n=512 if args.quick else 3072)
            log.info("similarity: streamed from HDF5 (float32 GEMM rate %.1f GFLOP/s)", matmul["best_gflops"])
            if args.quick:
                stream = bench_similarity.bench_streaming(
                    work_dir / "similarity",
                    refit_counts=(2, 3),
                    n_prompts=4,
                    n_pos=12,
                    series_prompts=2,
                    n_distinct=2,
                    matmul=matmul,
                )
            else:
                stream = bench_similarity.bench_streaming(work_dir / "similarity", matmul=matmul)
            shutil.rmtree(work_dir / "similarity", ignore_errors=True)
            log.info("similarity: with and without fletcher32 checksums")
            checksums = (
                bench_similarity.bench_checksum_overhead(
                    work_dir / "checksums", n_refits=3, n_prompts=4, n_pos=12, n_distinct=2, repeats=1
                )
                if args.quick
                else bench_similarity.bench_checksum_overhead(work_dir / "checksums")
            )
            shutil.rmtree(work_dir / "checksums", ignore_errors=True)
            summary["similarity_checksum_overhead"] = checksums["similarity_checksum_overhead"]
            largest = max(int(count) for count in stream["similarity_seconds_by_refits_series"])
            summary["similarity_50_refits_seconds"] = stream.get(f"similarity_{largest}_refits_seconds")
            summary["similarity_max_abs_diff"] = loop["similarity_max_abs_diff"]
            for key in ("similarity_gemm_fraction", "similarity_peak_rss_gb", "similarity_scaling_exponent"):
                summary[key] = stream[key]
            details["similarity"] = {**loop, **stream, **checksums}
        if "cache" in stages:
            log.info("cache: cache_activations vs its bare forward passes")
            cache = (
                bench_cache.bench_cache(work_dir, repeats=2, n_prompts=10)
                if args.quick
                else bench_cache.bench_cache(work_dir)
            )
            log.info("cache: the stage with and without its integrity checks")
            cache |= (
                bench_cache.bench_checksum_overhead(work_dir, repeats=1, n_prompts=10)
                if args.quick
                else bench_cache.bench_checksum_overhead(work_dir)
            )
            log.info("cache: one published-size l8_h16 refit with the published config's cache defaults")
            cache |= bench_cache_published.bench_cache_published(
                work_dir / "published", **({"n_primary": 4, "n_sweep": 2} if args.quick else {})
            )
            shutil.rmtree(work_dir / "published", ignore_errors=True)
            keys = (
                "cache_overhead",
                "cache_max_abs_diff",
                "cache_checksum_overhead",
                "cache_published_l8_h16_seconds",
                "cache_published_l8_h16_mb",
            )
            for key in keys:
                summary[key] = cache[key]
            details["cache"] = cache
        if "paper_scale" in stages:
            log.info("paper scale: similarity and stability tables of 50 l8_h16 refits")
            paper = bench_paper_scale.bench_paper_scale(
                work_dir / "paper_scale",
                **({"n_refits": 3, "n_distinct": 2, "n_primary": 4, "n_sweep": 2} if args.quick else {}),
            )
            shutil.rmtree(work_dir / "paper_scale", ignore_errors=True)
            summary["paper_scale_analysis_seconds"] = paper["paper_scale_analysis_seconds"]
            summary["paper_scale_one_to_one_fraction"] = paper["paper_scale_one_to_one_fraction"]
            details["paper_scale"] = paper
        if "bootstrap" in stages:
            log.info("bootstrap: 1,000 resamples of 50 l8_h16 refits")
            boot = bench_bootstrap.bench_bootstrap(
                **({"n_refits": 4, "n_groups": 3, "n_boot": 20} if args.quick else {})
            )
            summary["bootstrap_seconds"] = boot["bootstrap_seconds"]
            summary["bootstrap_peak_rss_gb"] = boot["bootstrap_peak_rss_gb"]
            summary["bootstrap_one_to_one_seconds"] = boot["bootstrap_one_to_one_seconds"]
            details["bootstrap"] = boot
        if "train" in stages:
            log.info("train: train_refit vs transformer_lens.tools.training.train")
            train = (
                bench_train.bench_train(
                    work_dir / "train", repeats=1, steps=8, device=args.device, threads=args.train_threads
                )
                if args.quick
                else bench_train.bench_train(work_dir / "train", device=args.device, threads=args.train_threads)
            )
            summary["train_vs_transformer_lens"] = train["train_vs_transformer_lens"]
            details["train"] = train
        if "drop_swap" in stages:
            log.info("drop_swap: every layer drop and swap of one l8_h8 refit vs one intact pass (issue 14)")
            drop_swap = bench_drop_swap.bench_drop_swap(**({"n_tokens": 2048, "repeats": 1} if args.quick else {}))
            for key in (
                "drop_swap_seconds_per_refit",
                "drop_swap_vs_intact",
                "drop_swap_flop_ratio",
                "drop_swap_vs_flops",
            ):
                summary[key] = drop_swap[key]
            details["drop_swap"] = drop_swap
        if "head_types" in stages:
            log.info("head_types: one l8_h16 refit's probe scores beside its cache stage")
            head_types = bench_head_types.bench_head_types(
                **({"architecture": "l2_h8", "repeats": 1, "n_primary": 4, "n_sweep": 2} if args.quick else {})
            )
            summary["head_types_seconds_per_refit"] = head_types["head_types_seconds_per_refit"]
            summary["head_types_vs_cache"] = head_types["head_types_vs_cache"]
            details["head_types"] = head_types
        if "neurons" in stages:
            log.info("neurons: the streamed statistics and the rotation null of one refit pair, one thread")
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # a spinning second thread slows the small chunks
            try:
                neurons = bench_neurons.bench_neurons(quick=args.quick)
            finally:
                torch.set_num_threads(threads)
            for key in TARGETS:
                if key.startswith("neuron_"):
                    summary[key] = neurons[key]
            details["neurons"] = neurons
        if "job_startup" in stages:
            log.info("job_startup: do-nothing Snakemake script jobs")
            startup = bench_job_startup.bench_job_startup(n_jobs=3 if args.quick else 8)
            summary["job_startup_seconds"] = startup["job_startup_seconds"]
            details["job_startup"] = startup
        if "training_model" in stages:
            log.info("training_model: the plain model against the bridge, stacks against refits trained alone (CPU)")
            model = bench_training_model.bench_training_model(
                work_dir / "training_model",
                threads=args.train_threads,
                **({"steps": 2, "repeats": 1, "n_layers": 2, "quick": True} if args.quick else {}),
            )
            for key in (
                "stack_vs_k1_max_abs_diff",
                "stack_forward_max_abs_diff",
                "plain_vs_bridge_ops_per_step",
                "stack_cpu_speedup_k4",
                "train_bf16_loss_delta_sd",
            ):
                summary[key] = model[key]
            details["training_model"] = model
        if "train_gpu" in stages:
            import torch

            if torch.cuda.is_available():
                log.info("train_gpu: the training loop at the paper's shape on %s", torch.cuda.get_device_name())
                gpu = bench_train_gpu.bench_train_gpu(work_dir / "train_gpu", quick=args.quick)
                for key in TARGETS:
                    if key.startswith("train_") and key in gpu:
                        summary[key] = gpu[key]
                details["train_gpu"] = gpu
            else:
                notes.append("train_gpu: skipped, no CUDA device here (torch.cuda.is_available() is False)")
        if args.demo:
            log.info("demo: the whole `make demo` DAG from scratch")
            demo = run_demo(work_dir)
            summary["demo_wall_seconds"] = demo["demo_wall_seconds"]
            details["demo"] = demo
        else:
            notes.append("demo_wall_seconds: not measured in this run (pass --demo to time `make demo` from scratch)")
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    details["load_average_end"] = common.load_average()
    details["wall_seconds"] = time.perf_counter() - start
    details["quick"] = args.quick
    summary["targets"] = check_targets(summary)
    summary["notes"] = notes
    summary["details"] = details
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    print(format_table(summary))
    print(
        f"\nload average {details['load_average_start']} -> {details['load_average_end']}, "
        f"{details['wall_seconds']:.0f} s; full numbers in {args.out}"
    )
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
