"""Activation-cache benchmarks: what the cache stage costs beyond the model's own forward passes.

The model is the demo's l4_h8 architecture (config/demo.yaml: 4 layers, d_model 64, 8 heads of 8,
d_mlp 256, n_ctx 256, vocab 1024) at its seeded random initialisation; the prompts are the demo config's
`prompt_sets`, loaded as the cache rule loads them (resources/prompts/demo_synthetic.json and
length_sweep.json, 220 prompts, BOS prepended; --quick keeps 10 per set at evenly spaced ranks of their
token length, the longest included); the tokenizer is the demo's byte-level BPE when
`results/demo/tokenizers/demo_bpe` exists, else one trained here on the synthetic corpus (same recipe,
temporary directory). Torch runs the demo's `compute.cache_threads` threads.

- `bench_cache`: `cache_overhead` = wall time of `headstab.activations.writer.cache_activations` for one
  demo refit with the demo config's cache options (tokenizing, the forward passes with their hooks,
  packing, compressing, checksums, writing, fsync and rename included) / wall time of the bare forward
  passes `model(tokens)` of the same length-sorted, right-padded batches alone; alternating (ABBA),
  medians. The same with gzip level 1 on hook_z and the residual hooks (`cache.compression_level: 1`; the
  default is uncompressed) is reported beside it. `cache_max_abs_diff`: every
  stored attention probability (hook_pattern, what stability is computed from) of every prompt's real
  tokens read back from the file against one `run_with_cache` per prompt (the notebooks' way);
  `cache_max_abs_diff_by_hook` the same for every stored hook, beside its largest magnitude (batched and
  single-prompt forward passes round differently, by a few float32 ulps of the values).
- `bench_checksum_overhead`: the cache stage (load final.pt checked against its meta.json's sha256,
  tokenize, write with fletcher32 on every dataset) against the same without them (plain torch.load, no
  fletcher32), alternating.

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
    from headstab.refits.tokenizer import load_tokenizer, train_bpe_tokenizer

    if (DEMO_TOKENIZER / "tokenizer.json").is_file():
        try:
            return load_tokenizer(DEMO_TOKENIZER), str(DEMO_TOKENIZER)
        except Exception as err:  # a half-built demo directory: fall back to training one
            log.warning("could not load %s (%s); training a tokenizer instead", DEMO_TOKENIZER, err)
    from headstab.data.synthetic import generate_synthetic_documents
    from headstab.plan.config import load_config

    vocab_size = load_config(common.REPO / "config" / "demo.yaml")["tokenizers"]["demo_bpe"]["vocab_size"]
    directory = work_dir / "demo_bpe"
    tokenizer = train_bpe_tokenizer(generate_synthetic_documents(seed=0, n_documents=500), vocab_size, directory)
    return tokenizer, f"trained in a temporary directory (synthetic corpus, 500 documents, vocab {vocab_size})"


def demo_model(tokenizer: Any, architecture: str = "l4_h8", seed: int = 1) -> Any:
    from headstab.plan.config import architecture_spec, load_config
    from headstab.refits.models import build_model

    spec = architecture_spec(load_config(common.REPO / "config" / "demo.yaml"), architecture)
    return build_model(spec, seed, tokenizer=tokenizer)


def demo_prompt_sets(tokenizer: Any, n_prompts: int | None = None) -> dict[str, list[str]]:
    """The demo config's prompt sets ({name: prompts}) as rule cache_activations loads them; with `n_prompts`,
    that many of each set at evenly spaced ranks of their token length (BOS included), the longest among them."""
    from headstab.activations.capture import tokenize_prompts
    from headstab.plan.config import load_config
    from headstab.prompts.loading import load_prompt_sets

    config = load_config(common.REPO / "config" / "demo.yaml")
    prompt_sets = load_prompt_sets({key: common.REPO / path for key, path in config["prompt_sets"].items()})
    if not n_prompts:
        return prompt_sets
    return {
        name: spread_by_length(prompts, [len(ids) for ids in tokenize_prompts(tokenizer, prompts, True)], n_prompts)
        for name, prompts in prompt_sets.items()
    }


def spread_by_length(prompts: list[str], lengths: list[int], n_prompts: int) -> list[str]:
    """`n_prompts` of `prompts` at evenly spaced ranks of `lengths` (the shortest and the longest), in file order."""
    by_length = np.argsort(lengths, kind="stable")
    ranks = np.unique(np.linspace(0, len(prompts) - 1, min(n_prompts, len(prompts))).round().astype(int))
    return [prompts[i] for i in sorted(by_length[ranks])]


def forward_batches(tokenizer: Any, prompt_sets: dict[str, list[str]], batch_size: int) -> list[Any]:
    """The batches the cache writer runs: per prompt set, prompts sorted by length, right-padded."""
    import torch

    from headstab.activations.capture import pad_token_id_of, pad_token_lists, tokenize_prompts

    batches = []
    for prompts in prompt_sets.values():
        tokens, lengths = pad_token_lists(
            tokenize_prompts(tokenizer, prompts, prepend_bos=True), pad_token_id_of(tokenizer)
        )
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batches.append(torch.as_tensor(tokens[rows, : int(lengths[rows].max())], dtype=torch.long))
    return batches


def loop_activations(model: Any, token_lists: list[list[int]]) -> list[dict[str, np.ndarray]]:
    """One run_with_cache per prompt (the notebooks' way); per prompt the stored hooks, [layer, ...]."""
    import torch

    from headstab.activations.capture import hook_template, resid_hook_name, stored_hooks

    out = []
    with torch.inference_mode():
        for ids in token_lists:
            _, cache = model.run_with_cache(torch.tensor([ids]))
            out.append({hook: np.stack([cache[hook_template(hook).format(layer=layer)][0].numpy()
                                        for layer in range(int(model.cfg.n_layers))])
                        for hook in stored_hooks(resid_hook_name(model))})  # fmt: skip
    return out


def max_abs_diff_by_hook(
    path: Path, model: Any, tokenizer: Any, prompt_sets: dict[str, list[str]]
) -> dict[str, dict[str, float]]:
    """Per stored hook: the largest difference between what the cache stores for real tokens and one
    forward pass per prompt, and the largest magnitude of the hook's values (the scale of that difference)."""
    from headstab.activations.capture import tokenize_prompts
    from headstab.activations.reader import open_cache

    out: dict[str, dict[str, float]] = {}
    with open_cache(path) as cache:
        for name, prompts in prompt_sets.items():
            stored = {
                "hook_pattern": cache.hook_pattern(name),
                "hook_z": cache.hook_z(name),
                "hook_resid_mid": cache.resid(name, "hook_resid_mid"),
            }
            for index, alone in enumerate(
                loop_activations(model, tokenize_prompts(tokenizer, prompts, prepend_bos=True))
            ):
                n = alone["hook_pattern"].shape[-1]
                for hook, values in alone.items():
                    ours = stored[hook][:, index, :, :n, :n] if hook == "hook_pattern" else stored[hook][:, index, :n]
                    entry = out.setdefault(hook, {"max_abs_diff": 0.0, "max_abs_value": 0.0})
                    entry["max_abs_diff"] = max(entry["max_abs_diff"], float(np.abs(ours - values).max()))
                    entry["max_abs_value"] = max(entry["max_abs_value"], float(np.abs(values).max()))
    return out


def bench_cache(work_dir: Path, repeats: int = 6, n_prompts: int | None = None) -> dict[str, Any]:
    """`cache_overhead` (medians of `repeats` ABBA runs), its gzip-1 variant, and `cache_max_abs_diff`."""
    import torch

    from headstab.activations.writer import CacheOptions, cache_activations
    from headstab.plan.config import load_config

    config = load_config(common.REPO / "config" / "demo.yaml")
    options = {key: config["cache"][key] for key in ("batch_size", "dtype", "compression_level")}
    torch.set_num_threads(int(config["compute"]["cache_threads"]))
    tokenizer, tokenizer_source = demo_tokenizer(work_dir)
    prompt_sets = demo_prompt_sets(tokenizer, n_prompts)
    model = demo_model(tokenizer)
    model.eval()
    batches = forward_batches(tokenizer, prompt_sets, options["batch_size"])
    path = work_dir / "bench_cache.h5"

    def forward() -> None:
        with torch.inference_mode():
            for batch in batches:
                model(batch)

    def cache(compression_level: int | None) -> None:
        cache_activations(
            path,
            model,
            tokenizer,
            prompt_sets,
            options=CacheOptions(show_progress=False, **{**options, "compression_level": compression_level}),
        )

    variants = {
        "forward": forward,
        "cache": lambda: cache(options["compression_level"]),
        "gzip1": lambda: cache(1),
    }
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        fn()  # warm-up
    for round_ in range(repeats):  # alternate, so drifting machine load hits every variant alike
        for name in variants if round_ % 2 == 0 else reversed(variants):
            path.unlink(missing_ok=True)  # a rename onto an old file would time its deletion
            runs[name].append(common.timed(variants[name])[0])
    medians = {name: float(np.median(times)) for name, times in runs.items()}
    cache(options["compression_level"])
    by_hook = max_abs_diff_by_hook(path, model, tokenizer, prompt_sets)
    return {
        "cache_overhead": medians["cache"] / medians["forward"],
        "cache_overhead_gzip1": medians["gzip1"] / medians["forward"],
        "cache_max_abs_diff": by_hook["hook_pattern"]["max_abs_diff"],
        "cache_max_abs_diff_by_hook": by_hook,
        "cache_seconds": runs,
        "cache_setup": (
            f"demo l4_h8 (random init, seed 1), prompt sets {', '.join(prompt_sets)} ({sum(map(len, prompt_sets.values()))} "
            f"prompts, BOS prepended), config/demo.yaml cache options {options}, {torch.get_num_threads()} torch "
            f"thread(s); tokenizer: {tokenizer_source}; cache_activations (the file written, fsynced and renamed) vs "
            f"model(tokens) of the same {len(batches)} batches; alternating (ABBA), medians of {repeats}"
        ),
    }


def bench_checksum_overhead(work_dir: Path, repeats: int = 6, n_prompts: int | None = None) -> dict[str, Any]:
    """`cache_checksum_overhead`: (cache stage with its integrity checks) / (without) - 1, medians of `repeats`."""
    import torch

    from headstab.activations.capture import pad_token_id_of, tokenize_prompts
    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.fileio import sha256_file, write_json_atomic
    from headstab.refits.models import load_verified_state_dict, save_weights

    tokenizer, _ = demo_tokenizer(work_dir)
    prompt_sets = demo_prompt_sets(tokenizer, n_prompts)
    model = demo_model(tokenizer)
    weights = work_dir / "checkpoint" / "final.pt"
    save_weights(model, weights)
    write_json_atomic(weights.parent / "meta.json", {"final_weights_sha256": sha256_file(weights)})
    path = work_dir / "checksum_cache.h5"

    def stage(checksum: bool) -> None:
        state = (
            load_verified_state_dict(weights)
            if checksum
            else torch.load(weights, map_location="cpu", weights_only=True)
        )
        model.load_state_dict(state)
        token_sets = {
            name: tokenize_prompts(tokenizer, prompts, prepend_bos=True) for name, prompts in prompt_sets.items()
        }
        write_activation_cache(path, model, token_sets, pad_token_id=pad_token_id_of(tokenizer), prompt_texts=prompt_sets, options=CacheOptions(show_progress=False, checksum=checksum))  # fmt: skip

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
    parser.add_argument(
        "--quick", action="store_true", help="10 prompts per set (the longest among them), few repeats (smoke test)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        if args.quick:
            results = bench_cache(work_dir, repeats=2, n_prompts=10) | bench_checksum_overhead(
                work_dir, 1, n_prompts=10
            )
        else:
            results = bench_cache(work_dir) | bench_checksum_overhead(work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
