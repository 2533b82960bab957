"""Hand-written I/O (cache format 2) against h5py's own filters and reads (format 3), whole stages.

Until cache format 3 the cache writer compressed chunks in a thread pool and wrote them with
`write_direct_chunk`, the similarity engine read the contiguous packed patterns with `pread` in
threads and overlapped the next block's read with the current Gram. The restructuring keeps such
machinery only where it makes its whole stage at least 1.5x faster; this script measures that, side
by side in one run:

- "handwritten": `src/headstab` of `--baseline` (default BASELINE, a commit before format 3),
  extracted with `git archive` into a temporary directory;
- "h5py": `src/headstab` of this working tree.

Each measurement runs in a child process whose PYTHONPATH puts one of the two first, alternating
between them, medians of `--repeats`:

- cache: `write_activation_cache` of every demo prompt set (primary and the length sweep, 220
  prompts) for the demo l4_h8 architecture (seeded random init, built with TransformerLens directly so
  both versions get the same model); the handwritten writer with `compress_threads` = the CPU count,
  as the workflow's `cache_threads` gave it. Loading final.pt and tokenizing, the same for both, are
  left out: they would only bring the ratio closer to 1.
- similarity: `pair_similarity_from_caches` over 50 refits of l8_h16 (synthetic caches written by each
  version's own writer, 4 distinct, the rest symlinks), the workflow's cross_layer scope on 20 prompts
  of 96 tokens and the read-heaviest same_layer scope on 100; the handwritten engine with `workers` =
  the CPU count.

Run: `python benchmarks/bench_handwritten.py [--quick] [--baseline COMMIT]` (needs the git history).
"""

from __future__ import annotations

import argparse
import inspect
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
def time_cache(token_file: Path, out_path: Path) -> dict[str, Any]:
    import torch
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    from headstab.caches import write_activation_cache

    torch.set_num_threads(os.cpu_count() or 1)
    sets = json.loads(token_file.read_text())
    config = TransformerBridgeConfig(**DEMO_L4_H8, act_fn="gelu", normalization_type="LN",
                                     positional_embedding_type="standard", init_mode="gpt2", seed=1)  # fmt: skip
    model = TransformerBridge.boot_native(config)
    options = _accepted(write_activation_cache, compress_threads=os.cpu_count() or 1)
    write = lambda: write_activation_cache(out_path, model, sets["tokens"], pad_token_id=0, prompt_texts=sets["texts"],  # noqa: E731
                                           show_progress=False, **options)
    write()  # warm-up: imports, thread pools
    seconds, _ = common.timed(write)
    return {"seconds": seconds, "bytes": out_path.stat().st_size}


def write_similarity_caches(directory: Path, n_refits: int, n_prompts: int, n_pos: int) -> None:
    shape = common.L8_H16
    common.write_synthetic_caches(directory, n_refits, shape["n_layers"], shape["n_heads"], n_prompts, n_pos, n_distinct=4)


def time_similarity(paths: list[str], scope: str) -> dict[str, Any]:
    import torch  # noqa: F401  (a one-off import, kept out of the clock)

    from headstab.similarity import pair_similarity_from_caches

    options = _accepted(pair_similarity_from_caches, workers=os.cpu_count() or 1)
    start = time.perf_counter()
    similarity = pair_similarity_from_caches(paths, "primary", progress=False, scope=scope, **options)
    return {"seconds": time.perf_counter() - start, "checksum": float(np.abs(similarity).sum(dtype=np.float64))}


# ---------------------------------------------------------------- the comparison
def _child(source: Path, args: list[str], timeout: float = 1800.0) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source), "TQDM_DISABLE": "1"}
    code, peak_gb, stdout = common.run_child_measuring_rss([str(Path(__file__).resolve()), *args], timeout, env)
    if code != 0:
        raise RuntimeError(f"child {args[:2]} under {source} failed with exit code {code}:\n{stdout[-2000:]}")
    return common.last_json_line(stdout) | {"peak_rss_gb": peak_gb}


def demo_token_sets(work_dir: Path, n_prompts: int | None) -> Path:
    """Every demo prompt set tokenized once (with this tree's code), shared by both versions."""
    import bench_cache

    from headstab.caches import tokenize_prompts
    from headstab.prompts import load_prompt_file

    prompts = {**load_prompt_file("primary", common.REPO / "resources" / "prompts" / "primary.json"),
               **load_prompt_file("len", common.REPO / "resources" / "prompts" / "length_sweep.json")}
    prompts = {name: texts[:n_prompts] if n_prompts else texts for name, texts in prompts.items()}
    tokenizer, _ = bench_cache.demo_tokenizer(work_dir)
    tokens = {name: tokenize_prompts(tokenizer, texts, prepend_bos=True) for name, texts in prompts.items()}
    path = work_dir / "demo_tokens.json"
    path.write_text(json.dumps({"tokens": tokens, "texts": prompts}))
    return path


def compare(work_dir: Path, baseline: str, repeats: int, quick: bool) -> dict[str, Any]:
    sources = {"handwritten": extract_baseline(baseline, work_dir / "baseline"), "h5py": common.REPO / "src"}
    token_file = demo_token_sets(work_dir, 5 if quick else None)
    n_refits, sizes = (3, {"cross_layer": 4, "same_layer": 6}) if quick else (50, {"cross_layer": 20, "same_layer": 100})
    n_pos = 12 if quick else 96
    caches = {}
    for version, source in sources.items():
        for scope, n_prompts in sizes.items():
            directory = work_dir / f"caches_{version}_{scope}"
            _child(source, ["--write-caches", str(directory), str(n_refits), str(n_prompts), str(n_pos)])
            caches[version, scope] = sorted(map(str, directory.glob("seed*.h5")), key=lambda p: int(Path(p).stem[4:]))
    os.sync()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {stage: {v: [] for v in sources} for stage in ("cache", *sizes)}
    for _ in range(repeats):  # alternate, so drifting machine load hits both alike
        for version, source in sources.items():
            runs["cache"][version].append(_child(source, ["--time-cache", str(token_file), str(work_dir / f"{version}.h5")]))
            for scope in sizes:
                runs[scope][version].append(_child(source, ["--time-similarity", scope, *caches[version, scope]]))
    out: dict[str, Any] = {"baseline_commit": baseline, "machine": common.machine_note(), "repeats": repeats}
    for stage, by_version in runs.items():
        medians = {version: float(np.median([run["seconds"] for run in results])) for version, results in by_version.items()}
        out[stage] = {
            "seconds": medians,
            "runs": {version: [run["seconds"] for run in results] for version, results in by_version.items()},
            "peak_rss_gb": {version: max(run["peak_rss_gb"] for run in results) for version, results in by_version.items()},
            "handwritten_speedup": medians["h5py"] / medians["handwritten"],
        }
        if stage == "cache":
            out[stage]["file_bytes"] = {version: results[-1]["bytes"] for version, results in by_version.items()}
        else:
            agree = [results[-1]["checksum"] for results in by_version.values()]
            out[stage]["sum_abs_similarity"] = agree
        log.info("%s: handwritten %.2f s, h5py %.2f s (handwritten %.2fx faster)", stage, medians["handwritten"],
                 medians["h5py"], out[stage]["handwritten_speedup"])  # fmt: skip
    out["setup"] = (
        f"cache: write_activation_cache of {sum(len(t) for t in json.loads(token_file.read_text())['tokens'].values())} "
        f"demo prompts, demo l4_h8; similarity: pair_similarity_from_caches over {n_refits} refits of l8_h16, "
        f"{sizes} prompts of {n_pos} tokens per scope; handwritten = src/headstab of {baseline}"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help="commit whose src/headstab is the hand-written version")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    parser.add_argument("--write-caches", nargs=4, metavar=("DIR", "REFITS", "PROMPTS", "POS"), help="child")
    parser.add_argument("--time-cache", nargs=2, metavar=("TOKENS", "OUT"), help="child")
    parser.add_argument("--time-similarity", nargs="+", metavar=("SCOPE", "CACHE"), help="child")
    args = parser.parse_args(argv)
    if args.write_caches:
        directory, n_refits, n_prompts, n_pos = args.write_caches
        write_similarity_caches(Path(directory), int(n_refits), int(n_prompts), int(n_pos))
        print(json.dumps({"seconds": 0.0}))
    elif args.time_cache:
        print(json.dumps(time_cache(Path(args.time_cache[0]), Path(args.time_cache[1]))))
    elif args.time_similarity:
        print(json.dumps(time_similarity(args.time_similarity[1:], args.time_similarity[0])))
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
        try:
            results = compare(work_dir, args.baseline, 1 if args.quick else args.repeats, args.quick)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
        print(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
