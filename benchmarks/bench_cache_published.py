"""What caching the published refits costs: time and disk of one published-size cache, and disk for all 1,210.

The models are random-initialised refits of the published architectures' shapes (config/published.yaml:
the paper's dimensions, e.g. l8_h16 with d_model 512, 8 x 16 heads of 64, d_mlp 2048, vocab 48,262;
GPT-2 small: 12 x 12 heads, d_model 768); the prompts have the paper's lengths, as in
bench_paper_scale.py: the 100 primary prompts with the word counts of resources/prompts/primary.json x
4/3 tokens per word + BOS (29-85 tokens) and the length sweep (20 prompts each of 5-50 tokens + BOS);
the token ids are random (the hub tokenizers are not reachable offline). The writer runs with the
published config's cache options (`headstab.plan.jobs.cache_options`) and `compute.cache_threads`.

- `bench_cache_published`: `cache_published_l8_h16_seconds`, the wall time of `write_activation_cache`
  for one l8_h16 refit on every prompt set in a child process (model built and token ids drawn outside
  the clock; the forward passes, packing, checksums, writing, fsync and rename inside), and
  `cache_published_l8_h16_mb`, the file's size.
- `cache_sizes`: the file of each distinct shape written with the published defaults and with the
  layouts they replace, per dataset; the total over every refit of the published config.

Run alone: `python benchmarks/bench_cache_published.py [--quick] [--sizes]`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_paper_scale  # noqa: E402
import common  # noqa: E402

log = logging.getLogger("benchmarks.cache_published")

PUBLISHED = common.REPO / "config" / "published.yaml"
# The layouts the published defaults replace, as changes to them (the last: the defaults before activation_sets).
VARIANTS = {
    "published defaults": {},
    "patterns uncompressed": {"pattern_compression_level": None},
    "uncompressed": {"compression_level": None, "pattern_compression_level": None},
    "every set, uncompressed": {"activation_sets": "all", "compression_level": None, "pattern_compression_level": None},
}
# One architecture per distinct stored shape: layers x heads (the _wd twins have the same shapes; an
# attention-only model stores hook_resid_post where the others store hook_resid_mid, of the same size).
SHAPES = ("l2_h8", "l2_h16", "l4_h8", "l4_h16", "l8_h8", "l8_h16", "l2_h8_attn", "gpt2")


def published_options(changes: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """(writer options from config/published.yaml's cache defaults with `changes`, compute.cache_threads)."""
    from headstab.plan.config import load_config
    from headstab.plan.jobs import cache_options

    config = load_config(PUBLISHED)
    config["cache"] = {**config["cache"], **(changes or {})}
    options = cache_options(config)
    keys = (
        "batch_size",
        "dtype",
        "compression_level",
        "pattern_compression_level",
        "extra_resid_hooks",
        "activation_sets",
    )
    return {key: options[key] for key in keys if key in options}, int(config["compute"]["cache_threads"])


def write_cache(
    path: Path, architecture: str, lengths: dict[str, list[int]], changes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write one random-init refit's cache with the published options; its write time and sizes."""
    import h5py
    import torch

    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.plan.config import architecture_spec, load_config
    from headstab.refits.models import build_model

    spec = architecture_spec(load_config(PUBLISHED), architecture)
    options, threads = published_options(changes)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    token_sets = {
        name: [[0] + rng.integers(1, spec.d_vocab, size=n - 1).tolist() for n in counts]
        for name, counts in lengths.items()
    }
    model = build_model(spec, 1)
    path.unlink(missing_ok=True)
    seconds, _ = common.timed(
        lambda: write_activation_cache(
            path, model, token_sets, pad_token_id=0, options=CacheOptions(show_progress=False, **options)
        )
    )
    by_dataset: dict[str, int] = {}
    with h5py.File(path) as handle:
        for group in handle.values():
            for key, dataset in group.items():
                by_dataset[key] = by_dataset.get(key, 0) + dataset.id.get_storage_size()
    return {"seconds": seconds, "bytes": path.stat().st_size, "by_dataset": by_dataset, "options": options}


def bench_cache_published(
    work_dir: Path, architecture: str = "l8_h16", n_primary: int | None = None, n_sweep: int = 20
) -> dict[str, Any]:
    """`cache_published_<arch>_seconds` and `_mb`: one published-size refit cached in a child process."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f"{architecture}.h5"
    args = ["--write-job", str(path), architecture, str(n_primary or 0), str(n_sweep)]
    result, peak_gb = common.run_json_child(Path(__file__).resolve(), args, timeout=1800)
    lengths = bench_paper_scale.paper_lengths(n_primary, n_sweep)
    primary = np.asarray(lengths["primary"])
    return {
        f"cache_published_{architecture}_seconds": result["seconds"],
        f"cache_published_{architecture}_mb": result["bytes"] / 1e6,
        f"cache_published_{architecture}_mb_by_dataset": {
            key: size / 1e6 for key, size in result["by_dataset"].items()
        },
        f"cache_published_{architecture}_peak_rss_gb": peak_gb,
        f"cache_published_{architecture}_setup": (
            f"{architecture} of config/published.yaml (random init, seed 1); prompt sets {', '.join(lengths)}: primary "
            f"{primary.size} prompts of {primary.min()}-{primary.max()} tokens (word counts of primary.json x 4/3 + "
            f"BOS), {n_sweep} prompts per length set; random token ids; write_activation_cache with {result['options']} "
            f"in a child process, model built outside the clock"
        ),
    }


def cache_sizes(work_dir: Path, n_primary: int | None = None, n_sweep: int = 20) -> dict[str, Any]:
    """Per distinct shape and variant the file size (MB, by dataset); totals (GB) over the published config's refits."""
    from headstab.plan.config import architecture_spec, load_config, selected_architectures

    config = load_config(PUBLISHED)
    lengths = bench_paper_scale.paper_lengths(n_primary, n_sweep)
    shape_of = lambda spec: "gpt2" if spec.n_layers == 12 else f"l{spec.n_layers}_h{spec.n_heads}"  # noqa: E731
    measured: dict[str, dict[str, Any]] = {}
    for architecture in SHAPES:
        for variant, changes in VARIANTS.items():
            result = write_cache(work_dir / "sizes.h5", architecture, lengths, changes)
            measured.setdefault(architecture, {})[variant] = {
                "mb": result["bytes"] / 1e6, "by_dataset_mb": {k: v / 1e6 for k, v in result["by_dataset"].items()}
            }  # fmt: skip
            log.info("%s, %s: %.1f MB", architecture, variant, result["bytes"] / 1e6)
    totals = {variant: 0.0 for variant in VARIANTS}
    refits = 0
    for architecture in selected_architectures(config):
        spec = architecture_spec(config, architecture)
        key = architecture if architecture in measured else shape_of(spec)
        refits += len(spec.seeds)
        for variant in VARIANTS:
            totals[variant] += len(spec.seeds) * measured[key][variant]["mb"] / 1e3
    return {"cache_sizes_mb": measured, "cache_sizes_total_gb": totals, "cache_sizes_refits": refits}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 primary prompts, 2 per length set (smoke test)")
    parser.add_argument("--sizes", action="store_true", help="also measure every distinct shape (minutes)")
    parser.add_argument("--write-job", nargs=4, metavar=("PATH", "ARCH", "N_PRIMARY", "N_SWEEP"), help="child")
    args = parser.parse_args(argv)
    if args.write_job:
        path, architecture, n_primary, n_sweep = args.write_job
        lengths = bench_paper_scale.paper_lengths(int(n_primary) or None, int(n_sweep))
        print(json.dumps(write_cache(Path(path), architecture, lengths)))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    sizes = {"n_primary": 4, "n_sweep": 2} if args.quick else {}
    start = time.perf_counter()
    try:
        results = bench_cache_published(work_dir, **sizes)
        if args.sizes:
            results |= cache_sizes(work_dir, **sizes)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    results["wall_seconds"] = time.perf_counter() - start
    results["load_average"] = common.load_average()
    print(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")
    main()
