"""`head_types_seconds_per_refit`: the head-type scores of one refit of the paper's l8_h16, beside its cache stage.

One random-initialised refit of the paper's l8_h16 (config/config.yaml: d_model 512, 8 x 16 heads of 64,
d_mlp 2048, vocab 48,262), in one child process with `compute.cache_threads` torch threads (2), model
built and token ids drawn outside the clock. Alternating (ABAB), medians of `repeats`:

- head types: `probe_set` then `probe_scores` (the work of rule head_type_scores for one refit: the
  config's probe set, forward passes with hook_pattern only, every score);
- cache: `write_activation_cache` of the same model on every paper prompt set (the lengths of
  bench_paper_scale.py: 100 primary prompts of 29-85 tokens, the length sweep) with config/config.yaml's
  cache options (the work of rule cache_activations for one refit, as bench_cache_published.py times it).

`head_types_vs_cache` is their ratio (target <= 1).

    python benchmarks/bench_head_types.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_paper_scale  # noqa: E402
import common  # noqa: E402

CONFIG = common.REPO / "config" / "config.yaml"


def job(architecture: str, repeats: int, n_primary: int | None, n_sweep: int) -> dict[str, Any]:
    import torch

    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.head_types import probe_scores, probe_set
    from headstab.plan.config import architecture_spec, load_config
    from headstab.plan.jobs import cache_options
    from headstab.refits.models import build_model

    config = load_config(CONFIG)
    spec = architecture_spec(config, architecture)
    torch.set_num_threads(int(config["compute"]["cache_threads"]))
    options = cache_options(config)
    writer = {key: options[key] for key in ("batch_size", "dtype", "compression_level", "pattern_compression_level",
                                            "extra_resid_hooks", "activation_sets") if key in options}  # fmt: skip
    probe_options = config["head_types"]
    rng = np.random.default_rng(0)
    lengths = bench_paper_scale.paper_lengths(n_primary, n_sweep)
    token_sets = {
        name: [[0] + rng.integers(1, spec.d_vocab, size=n - 1).tolist() for n in counts]
        for name, counts in lengths.items()
    }
    model = build_model(spec, 1)
    model.eval()
    times: dict[str, list[float]] = {"head_types": [], "cache": []}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cache.h5"
        for _ in range(repeats):
            start = time.perf_counter()
            probe = probe_set(spec.d_vocab, probe_options["seed"], probe_options["n_sequences"],
                              probe_options["length"], bos_token=0, exclude=[0])  # fmt: skip
            probe_scores(model, probe, probe_options["batch_size"])
            times["head_types"].append(time.perf_counter() - start)
            path.unlink(missing_ok=True)
            start = time.perf_counter()
            write_activation_cache(
                path, model, token_sets, pad_token_id=0, options=CacheOptions(show_progress=False, **writer)
            )
            times["cache"].append(time.perf_counter() - start)
    return {
        "times": times,
        "threads": torch.get_num_threads(),
        "probe": {key: probe_options[key] for key in ("n_sequences", "length", "batch_size")},
    }


def bench_head_types(
    architecture: str = "l8_h16", repeats: int = 3, n_primary: int | None = None, n_sweep: int = 20
) -> dict[str, Any]:
    args = ["--job", architecture, str(repeats), str(n_primary or 0), str(n_sweep)]
    result, peak_gb = common.run_json_child(Path(__file__).resolve(), args, timeout=3600)
    head_types = statistics.median(result["times"]["head_types"])
    cache = statistics.median(result["times"]["cache"])
    return {
        "head_types_seconds_per_refit": head_types,
        "head_types_cache_seconds_per_refit": cache,
        "head_types_vs_cache": head_types / cache,
        "head_types_times": result["times"],
        "head_types_peak_rss_gb": peak_gb,
        "head_types_setup": (
            f"{architecture} of config/config.yaml (random init, seed 1), {result['threads']} torch threads; head types: "
            f"probe set {result['probe']} and probe_scores; cache: write_activation_cache on the paper prompt sets "
            f"with config/config.yaml's cache options; alternating, medians of {repeats}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--job", nargs=4, metavar=("ARCH", "REPEATS", "PRIMARY", "SWEEP"), help="child")
    args = parser.parse_args()
    if args.job:
        architecture, repeats, n_primary, n_sweep = args.job
        print(json.dumps(job(architecture, int(repeats), int(n_primary) or None, int(n_sweep))))
        return
    sizes = {"architecture": "l2_h8", "repeats": 1, "n_primary": 4, "n_sweep": 2} if args.quick else {}
    print(json.dumps(bench_head_types(**sizes), indent=2))


if __name__ == "__main__":
    main()
