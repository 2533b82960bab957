"""Hand-written I/O (cache format 2) against h5py's own filters and reads (format 3), whole stages.

Until cache format 3 the cache writer compressed chunks in a thread pool and wrote them with
`write_direct_chunk`, the similarity engine read the contiguous packed patterns with `pread` in
threads and overlapped the next block's read with the current Gram. The restructuring keeps such
machinery only where it makes its whole stage at least 1.5x faster; this script measures that, side
by side in one run:

- "handwritten": `src/headstab` of `--baseline` (default BASELINE, a commit before format 3),
  extracted with `git archive` into a temporary directory;
- "h5py": `src/headstab` of this working tree (format 3 when this was measured, now 4; fletcher32 on
  every dataset);
- "h5py_no_checksum": the same, files written without fletcher32: h5py's machinery alone, to tell
  what the checksums cost from what the hand-written code saved.

Each measurement runs in a child process whose PYTHONPATH puts its version first, the variants
alternating, `--repeats` rounds; the summary gives medians and minima (on a shared machine the
minimum is the run least disturbed by other jobs):

- cache: `write_activation_cache` of every demo prompt set (primary and the length sweep, 220
  prompts) for the demo l4_h8 architecture (seeded random init, built with TransformerLens directly so
  both versions get the same model), `--threads` torch threads, and as many compressor threads for
  the handwritten writer, as the rule's threads gave it (1 in config/demo.yaml). Loading final.pt and
  tokenizing, the same for both, are left out: they would only bring the ratio closer to 1.
- similarity: `pair_similarity_from_caches` over 50 refits of l8_h16 (synthetic caches written by each
  version's own writer, 4 distinct, the rest symlinks), the workflow's cross_layer scope on 20 prompts
  of 96 tokens and the read-heaviest same_layer scope on 100; the handwritten engine with `workers` =
  the CPU count.

Run: `python benchmarks/bench_handwritten.py [--quick] [--baseline COMMIT]` (needs the git history).
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

log = logging.getLogger("benchmarks.handwritten")

STAGES = ("cache", "cross_layer", "same_layer")
BASELINE = "e8126d5"  # caches.py / similarity.py still with the hand-written I/O (cache format 2)
DEMO_L4_H8 = {"n_layers": 4, "n_heads": 8, "d_model": 64, "d_head": 8, "d_mlp": 256, "n_ctx": 256, "d_vocab": 1024}


def extract_baseline(commit: str, directory: Path) -> Path:
    """`src/headstab` of `commit` under `directory`; returns the directory to put on PYTHONPATH."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(common.REPO), "archive", commit, "src/headstab"],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory / "src"


def _accepted(function: Any, **options: Any) -> dict[str, Any]:
    """The options `function` takes (the two versions differ in their knobs)."""
    parameters = inspect.signature(function).parameters
    return {key: value for key, value in options.items() if key in parameters}


# ---------------------------------------------------------------- child bodies (run under either version)
def _timed_with_cpu(fn: Any) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of all this process's threads, result) of one call."""
    cpu, start = time.process_time(), time.perf_counter()
    result = fn()
    return time.perf_counter() - start, time.process_time() - cpu, result


def time_cache(token_file: Path, out_path: Path, threads: int, checksum: bool, inner: int) -> dict[str, Any]:
    """`inner` timed writes of the demo cache after a warm-up; checksum False only exists from format 3 on."""
    import torch
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    write_activation_cache = common.cache_writer()
    torch.set_num_threads(threads)
    sets = json.loads(token_file.read_text())
    config = TransformerBridgeConfig(**DEMO_L4_H8, act_fn="gelu", normalization_type="LN",
                                     positional_embedding_type="standard", init_mode="gpt2", seed=1)  # fmt: skip
    model = TransformerBridge.boot_native(config)
    options = _accepted(write_activation_cache, compress_threads=threads) | ({} if checksum else {"checksum": False})

    def write():
        return write_activation_cache(
            out_path, model, sets["tokens"], pad_token_id=0, prompt_texts=sets["texts"], show_progress=False, **options
        )

    write()  # warm-up: imports, thread pools
    timings = [_timed_with_cpu(write)[:2] for _ in range(inner)]
    return {
        "seconds": [t[0] for t in timings],
        "cpu_seconds": [t[1] for t in timings],
        "bytes": out_path.stat().st_size,
    }


def write_similarity_caches(directory: Path, n_refits: int, n_prompts: int, n_pos: int, checksum: bool) -> None:
    shape = common.L8_H16
    common.write_synthetic_caches(directory, n_refits, shape["n_layers"], shape["n_heads"], n_prompts, n_pos,
                                  n_distinct=4, checksum=checksum)  # fmt: skip


def time_similarity(paths: list[str], scope: str) -> dict[str, Any]:
    import torch  # noqa: F401  (a one-off import, kept out of the clock)

    from headstab.similarity import pair_similarity_from_caches

    options = _accepted(pair_similarity_from_caches, workers=os.cpu_count() or 1)
    seconds, cpu, similarity = _timed_with_cpu(
        lambda: pair_similarity_from_caches(paths, "primary", progress=False, scope=scope, **options)
    )
    return {"seconds": [seconds], "cpu_seconds": [cpu], "sum_abs": float(np.abs(similarity).sum(dtype=np.float64))}


# ---------------------------------------------------------------- the comparison
def _child(source: Path, args: list[str], timeout: float = 1800.0) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source), "TQDM_DISABLE": "1"}
    result, peak_gb = common.run_json_child(Path(__file__).resolve(), args, timeout, env)
    return result | {"peak_rss_gb": peak_gb}


def demo_token_sets(work_dir: Path, n_prompts: int | None) -> Path:
    """Every demo prompt set tokenized once (with this tree's code), shared by both versions."""
    import bench_cache

    from headstab.activations.capture import tokenize_prompts
    from headstab.prompts import load_prompt_file

    prompts = {
        **load_prompt_file("primary", common.REPO / "resources" / "prompts" / "primary.json"),
        **load_prompt_file("len", common.REPO / "resources" / "prompts" / "length_sweep.json"),
    }
    prompts = {name: texts[:n_prompts] if n_prompts else texts for name, texts in prompts.items()}
    tokenizer, _ = bench_cache.demo_tokenizer(work_dir)
    tokens = {name: tokenize_prompts(tokenizer, texts, prepend_bos=True) for name, texts in prompts.items()}
    path = work_dir / "demo_tokens.json"
    path.write_text(json.dumps({"tokens": tokens, "texts": prompts}))
    return path


def _summary(by_variant: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians and minima per variant, and how much faster the handwritten version is than each h5py one."""
    runs = {variant: [s for result in results for s in result["seconds"]] for variant, results in by_variant.items()}
    medians = {variant: float(np.median(times)) for variant, times in runs.items()}
    minima = {variant: min(times) for variant, times in runs.items()}
    out = {
        "median_seconds": medians,
        "min_seconds": minima,
        "runs": runs,
        "cpu_seconds": {
            variant: [s for r in results for s in r["cpu_seconds"]] for variant, results in by_variant.items()
        },
        "peak_rss_gb": {variant: max(r["peak_rss_gb"] for r in results) for variant, results in by_variant.items()},
    }
    for variant in ("h5py", "h5py_no_checksum"):
        out[f"handwritten_speedup_vs_{variant}"] = {
            "medians": medians[variant] / medians["handwritten"],
            "minima": minima[variant] / minima["handwritten"],
        }
    return out


def compare(
    work_dir: Path,
    baseline: str,
    repeats: int,
    quick: bool,
    stages: tuple[str, ...] = STAGES,
    threads: int = 1,
    inner: int = 3,
) -> dict[str, Any]:
    """Alternate the three variants `repeats` times per stage; see the module docstring."""
    variants = {
        "handwritten": (extract_baseline(baseline, work_dir / "baseline"), True),
        "h5py": (common.REPO / "src", True),
        "h5py_no_checksum": (common.REPO / "src", False),
    }
    token_file = demo_token_sets(work_dir, 5 if quick else None)
    n_refits, sizes = (
        (3, {"cross_layer": 4, "same_layer": 6}) if quick else (50, {"cross_layer": 20, "same_layer": 100})
    )
    sizes = {scope: n_prompts for scope, n_prompts in sizes.items() if scope in stages}
    n_pos = 12 if quick else 96
    caches = {}
    for (variant, (source, checksum)), (scope, n_prompts) in itertools.product(variants.items(), sizes.items()):
        directory = work_dir / f"caches_{variant}_{scope}"
        _child(
            source, ["--write-caches", str(directory), str(n_refits), str(n_prompts), str(n_pos), str(int(checksum))]
        )
        caches[variant, scope] = sorted(map(str, directory.glob("seed*.h5")), key=lambda p: int(Path(p).stem[4:]))
    os.sync()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {stage: {v: [] for v in variants} for stage in stages}
    for _ in range(repeats):  # alternate, so drifting machine load hits every variant alike
        for variant, (source, checksum) in variants.items():
            if "cache" in stages:
                args = ["--time-cache", str(token_file), str(work_dir / f"{variant}.h5"), str(threads),
                        str(int(checksum)), str(inner)]  # fmt: skip
                runs["cache"][variant].append(_child(source, args))
            for scope in sizes:
                runs[scope][variant].append(_child(source, ["--time-similarity", scope, *caches[variant, scope]]))
    out: dict[str, Any] = {"baseline_commit": baseline, "machine": common.machine_note(), "repeats": repeats}
    for stage, by_variant in runs.items():
        out[stage] = _summary(by_variant)
        if stage == "cache":
            out[stage]["file_bytes"] = {variant: results[-1]["bytes"] for variant, results in by_variant.items()}
        else:
            out[stage]["sum_abs_similarity"] = {
                variant: results[-1]["sum_abs"] for variant, results in by_variant.items()
            }
        log.info(
            "%s: median s %s; handwritten faster by %s (vs h5py with checksums) and %s (without)",
            stage,
            {v: round(t, 2) for v, t in out[stage]["median_seconds"].items()},
            out[stage]["handwritten_speedup_vs_h5py"],
            out[stage]["handwritten_speedup_vs_h5py_no_checksum"],
        )
    n_demo = sum(len(t) for t in json.loads(token_file.read_text())["tokens"].values())
    out["setup"] = (
        f"cache: write_activation_cache of {n_demo} demo prompts, demo l4_h8, {threads} torch thread(s) (and "
        f"compressor thread(s) for handwritten), {inner} timed writes per child after a warm-up; similarity: "
        f"pair_similarity_from_caches over {n_refits} refits of l8_h16, {sizes} prompts of {n_pos} tokens per scope; "
        f"handwritten = src/headstab of {baseline}; children alternate, {repeats} per variant"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help="commit whose src/headstab is the hand-written version")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    parser.add_argument("--inner", type=int, default=3, help="cache stage: timed writes per child process")
    parser.add_argument(
        "--write-caches", nargs=5, metavar=("DIR", "REFITS", "PROMPTS", "POS", "CHECKSUM"), help="child"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="cache stage: torch threads, and the handwritten writer's compressor threads (the rule's "
        "threads, compute.cache_threads; 1 in config/demo.yaml)",
    )
    parser.add_argument(
        "--time-cache", nargs=5, metavar=("TOKENS", "OUT", "THREADS", "CHECKSUM", "INNER"), help="child"
    )
    parser.add_argument("--time-similarity", nargs="+", metavar=("SCOPE", "CACHE"), help="child")
    args = parser.parse_args(argv)
    if args.write_caches:
        directory, n_refits, n_prompts, n_pos, checksum = args.write_caches
        write_similarity_caches(Path(directory), int(n_refits), int(n_prompts), int(n_pos), checksum == "1")
        print(json.dumps({"written": directory}))
    elif args.time_cache:
        tokens, out, threads, checksum, inner = args.time_cache
        print(json.dumps(time_cache(Path(tokens), Path(out), int(threads), checksum == "1", int(inner))))
    elif args.time_similarity:
        print(json.dumps(time_similarity(args.time_similarity[1:], args.time_similarity[0])))
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
        try:
            stages = tuple(stage for stage in STAGES if stage in args.stages.split(","))
            results = compare(
                work_dir,
                args.baseline,
                1 if args.quick else args.repeats,
                args.quick,
                stages,
                args.threads,
                1 if args.quick else args.inner,
            )
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
        print(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
