"""Activation-cache benchmark (issue 6): `cache_activations` against one `run_with_cache` per prompt.

The model is the demo's l4_h8 architecture (config/demo.yaml: 4 layers, d_model 64, 8 heads of 8,
d_mlp 256, n_ctx 256, vocab 1024) at its seeded random initialisation; the prompts are the 100
primary prompts (resources/prompts/primary.json) with BOS prepended; the tokenizer is the demo's
byte-level BPE when `results/demo/tokenizers/demo_bpe` exists, else one trained here on the
synthetic corpus (same recipe, temporary directory).

- ours: `headstab.caches.cache_activations` (batched, right-padded, written to an HDF5 file with the
  writer's defaults: packed patterns, gzip-1 resid_mid/head_out; the time includes tokenizing,
  packing, compressing and writing).
- loop: what the paper's notebooks do, one `model.run_with_cache(tokens)` per prompt, keeping the
  same three activations (patterns, hook_resid_mid, hook_z) as numpy arrays in memory (no file).
Both run under the same torch thread count; medians of `repeats` alternating runs.
`cache_max_abs_diff` compares every prompt's real-token patterns read back from our file with the loop's.

`bench_checksum_overhead`: the cache stage of one demo refit (every demo prompt set: primary and the
length sweep) with its integrity checks (final.pt checked against its meta.json's sha256, fletcher32
on every dataset) against the same without them (plain torch.load, no fletcher32), alternating.

Run alone: `python benchmarks/bench_cache.py [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

log = logging.getLogger("benchmarks.cache")

DEMO_TOKENIZER = common.REPO / "results" / "demo" / "tokenizers" / "demo_bpe"


def demo_tokenizer(work_dir: Path) -> tuple[Any, str]:
    """(tokenizer, where it came from): the demo's BPE if built, else one trained now like it."""
    from headstab.tokenizer import load_tokenizer, train_bpe_tokenizer

    if (DEMO_TOKENIZER / "tokenizer.json").is_file():
        try:
            return load_tokenizer(DEMO_TOKENIZER), str(DEMO_TOKENIZER)
        except Exception as err:  # a half-built demo directory: fall back to training one
            log.warning("could not load %s (%s); training a tokenizer instead", DEMO_TOKENIZER, err)
    from headstab.data.synthetic import generate_synthetic_documents

    directory = work_dir / "demo_bpe"
    tokenizer = train_bpe_tokenizer(generate_synthetic_documents(seed=0, n_documents=500), 1024, directory)
    return tokenizer, "trained in a temporary directory (synthetic corpus, 500 documents, vocab 1024)"


def demo_model(tokenizer: Any, architecture: str = "l4_h8", seed: int = 1) -> Any:
    from headstab.config import architecture_spec, load_config
    from headstab.models import build_model

    spec = architecture_spec(load_config(common.REPO / "config" / "demo.yaml"), architecture)
    return build_model(spec, seed, tokenizer=tokenizer)


def loop_activations(model: Any, token_lists: list[list[int]]) -> list[dict[str, np.ndarray]]:
    """One run_with_cache per prompt (the notebooks' way); per prompt the three cached activations."""
    import torch

    from headstab.caches import resid_hook_name

    n_layers = int(model.cfg.n_layers)
    resid = resid_hook_name(model)
    out = []
    with torch.inference_mode():
        for ids in token_lists:
            _, cache = model.run_with_cache(torch.tensor([ids]))
            out.append({
                "attn_pattern": np.stack([cache[f"blocks.{l}.attn.hook_pattern"][0].numpy() for l in range(n_layers)]),
                "resid_mid": np.stack([cache[f"blocks.{l}.{resid}"][0].numpy() for l in range(n_layers)]),
                "head_out": np.stack([cache[f"blocks.{l}.attn.hook_z"][0].numpy() for l in range(n_layers)]),
            })  # fmt: skip
    return out


def bench_cache(work_dir: Path, repeats: int = 3, n_prompts: int | None = None, batch_size: int = 20) -> dict[str, Any]:
    from headstab.caches import cache_activations, open_cache, tokenize_prompts
    from headstab.prompts import load_prompt_file

    prompts = load_prompt_file("primary", common.REPO / "resources" / "prompts" / "primary.json")["primary"]
    prompts = prompts[:n_prompts] if n_prompts else prompts
    tokenizer, tokenizer_source = demo_tokenizer(work_dir)
    model = demo_model(tokenizer)
    model.eval()
    path = work_dir / "bench_cache.h5"

    def ours() -> None:
        path.unlink(missing_ok=True)
        cache_activations(path, model, tokenizer, {"primary": prompts}, batch_size=batch_size, show_progress=False)

    def loop() -> list[dict[str, np.ndarray]]:
        # Tokenizing is inside both timings (cache_activations tokenizes too).
        return loop_activations(model, tokenize_prompts(tokenizer, prompts, prepend_bos=True))

    ours(), loop()  # warm-up
    ours_runs, loop_runs, reference = [], [], None
    for _ in range(repeats):  # alternate, so drifting machine load hits both alike
        ours_runs.append(common.timed(ours)[0])
        seconds, reference = common.timed(loop)
        loop_runs.append(seconds)
    ours_s, loop_s = float(np.median(ours_runs)), float(np.median(loop_runs))

    diff = 0.0
    with open_cache(path) as cache:
        lengths = cache.lengths("primary")
        patterns = cache.attn_pattern("primary")  # [layer, prompt, head, q, k]
        for index, activations in enumerate(reference):
            n = int(lengths[index])
            diff = max(diff, float(np.abs(patterns[:, index, :, :n, :n] - activations["attn_pattern"]).max()))
    return {
        "cache_batched_vs_loop": loop_s / ours_s,
        "cache_max_abs_diff": diff,
        "cache_batched_seconds": ours_s,
        "cache_loop_seconds": loop_s,
        "cache_batched_runs": ours_runs,
        "cache_loop_runs": loop_runs,
        "cache_setup": (
            f"demo l4_h8 (random init, seed 1), {len(prompts)} primary prompts (BOS prepended, "
            f"{int(lengths.min())}-{int(lengths.max())} tokens), batch_size {batch_size}; tokenizer: {tokenizer_source}; "
            "ours writes the HDF5 cache (packed patterns, gzip-1 resid_mid/head_out), the loop keeps arrays in memory"
        ),
    }


def bench_checksum_overhead(work_dir: Path, repeats: int = 6, n_prompts: int | None = None) -> dict[str, Any]:
    """`cache_checksum_overhead`: (cache stage with its integrity checks) / (without) - 1, medians of `repeats`."""
    import torch

    from headstab.caches import pad_token_id_of, tokenize_prompts, write_activation_cache
    from headstab.models import load_verified_state_dict, save_weights
    from headstab.prompts import load_prompt_file
    from headstab.fileio import sha256_file, write_json_atomic

    prompt_sets = {**load_prompt_file("primary", common.REPO / "resources" / "prompts" / "primary.json"),
                   **load_prompt_file("len", common.REPO / "resources" / "prompts" / "length_sweep.json")}
    prompt_sets = {name: prompts[:n_prompts] if n_prompts else prompts for name, prompts in prompt_sets.items()}
    tokenizer, _ = demo_tokenizer(work_dir)
    model = demo_model(tokenizer)
    weights = work_dir / "checkpoint" / "final.pt"
    save_weights(model, weights)
    write_json_atomic(weights.parent / "meta.json", {"final_weights_sha256": sha256_file(weights)})
    path = work_dir / "checksum_cache.h5"

    def stage(checksum: bool) -> None:
        state = load_verified_state_dict(weights) if checksum else torch.load(weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        token_sets = {name: tokenize_prompts(tokenizer, prompts, prepend_bos=True) for name, prompts in prompt_sets.items()}
        write_activation_cache(path, model, token_sets, pad_token_id=pad_token_id_of(tokenizer), prompt_texts=prompt_sets,
                               show_progress=False, checksum=checksum)  # fmt: skip

    stage(True), stage(False)  # warm-up
    runs: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(repeats):  # alternate, first with then without, then the other way: drift hits both alike
        for checksum in (True, False) if round_ % 2 == 0 else (False, True):
            runs[checksum].append(common.timed(lambda: stage(checksum))[0])
    with_s, without_s = float(np.median(runs[True])), float(np.median(runs[False]))
    return {
        "cache_checksum_overhead": with_s / without_s - 1,
        "cache_checksum_seconds": {"with": runs[True], "without": runs[False]},
        "cache_checksum_setup": (
            f"demo l4_h8 (random init), prompt sets {', '.join(prompt_sets)} ({sum(map(len, prompt_sets.values()))} "
            "prompts): load final.pt (checked against meta.json's sha256, or a plain torch.load), tokenize, "
            f"write_activation_cache (fletcher32 on every dataset, or none); alternating (ABBA), medians of {repeats}"
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 prompts, 1 repeat (smoke test)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        if args.quick:
            results = bench_cache(work_dir, repeats=1, n_prompts=10) | bench_checksum_overhead(work_dir, 1, n_prompts=10)
        else:
            results = bench_cache(work_dir) | bench_checksum_overhead(work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
