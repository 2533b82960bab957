"""`paper_scale_analysis_seconds`: the similarity and stability tables of one architecture at the paper's scale.

50 random-initialised refits of the paper's l8_h16 (config/config.yaml: 8 layers of 16 heads, d_head 64,
d_model 512, d_mlp 2048, vocab 48,262), on prompts of the paper's length distribution: the 100 primary
prompts with the word counts of resources/prompts/primary.json (21-63 words, median 37, as the
authors' prompt file), at 4/3 tokens per word (a GPT-NeoX-style BPE on English; the paper's tokenizer is not shipped)
plus BOS, and the length sweep: 20 prompts each of 5, 10, 20, 30, 40 and 50 tokens plus BOS. Token ids
are random.

The caches are written by headstab's writer from `n_distinct` real models (seeds 1..n_distinct, the
config's init); the other refits are symlinks to them, to keep `make bench` short. Every refit's file is
still opened and read in full, and the arithmetic does not depend on the values, so the timed work is
the workflow's; only repeated files' reads come from the page cache.

Timed: the two rules' work, each in a fresh child process as a workflow job (interpreter start and
imports outside the clock): pair_similarity (every prompt set: `pair_similarity_from_caches`, the
workflow's cross_layer scope, `similarity.prompt_chunk` of the config; on the primary prompts the null tensor,
`null_pair_similarity_from_caches`, timed on its own as by_promptset's primary_null; `write_pair_similarity`), then
stability_tables (every similarity file read back; `stability_tables` with `analysis.layer_std_ddof`;
one CSV per table). Inside the tables job, the time spent in the one-to-one matching (the Hungarian
assignments and the gather of the assigned similarity) is `paper_scale_one_to_one_seconds`, and its share
of the whole analysis `paper_scale_one_to_one_fraction`.

Run alone: `python benchmarks/bench_paper_scale.py [--quick]`.
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
import common  # noqa: E402

log = logging.getLogger("benchmarks.paper_scale")

TOKENS_PER_WORD = 4 / 3
SWEEP_TOKENS = (5, 10, 20, 30, 40, 50)


def paper_lengths(n_primary: int | None = None, n_sweep: int = 20) -> dict[str, list[int]]:
    """{prompt set: token counts (BOS included)} of the paper's length distribution."""
    from headstab.prompts.loading import load_prompt_file

    prompts = load_prompt_file("primary", common.REPO / "resources" / "prompts" / "primary.json")["primary"]
    primary = [1 + round(len(text.split()) * TOKENS_PER_WORD) for text in prompts][:n_primary]
    return {"primary": primary, **{f"len{n}": [1 + n] * n_sweep for n in SWEEP_TOKENS}}


def write_caches(
    directory: Path, n_refits: int, n_distinct: int, lengths: dict[str, list[int]], architecture: str = "l8_h16"
) -> list[Path]:
    """seed{k}.h5 for k = 1..n_refits: real random-init models for the first n_distinct, symlinks after."""
    import torch

    from headstab.activations.writer import CacheOptions, write_activation_cache
    from headstab.plan.config import architecture_spec, load_config
    from headstab.refits.models import build_model

    config = load_config(common.REPO / "config" / "config.yaml")
    spec = architecture_spec(config, architecture)
    rng = np.random.default_rng(0)
    token_sets = {
        name: [[0] + rng.integers(1, spec.d_vocab, size=n - 1).tolist() for n in counts]
        for name, counts in lengths.items()
    }
    directory.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)
    paths = []
    for refit in range(1, n_refits + 1):
        path = directory / f"seed{refit}.h5"
        if refit <= n_distinct:
            write_activation_cache(
                path,
                build_model(spec, refit),
                token_sets,
                pad_token_id=0,
                options=CacheOptions(
                    show_progress=False,
                    **{key: config["cache"][key] for key in ("batch_size", "dtype", "compression_level")},
                ),
                attrs={"architecture": architecture, "seed": refit},
            )
        else:
            path.symlink_to(f"seed{(refit - 1) % n_distinct + 1}.h5")
        paths.append(path)
    return paths


# ---------------------------------------------------------------- the two jobs (child processes)
def similarity_job(caches: list[str], out_dir: Path, promptsets: list[str], prompt_chunk: int) -> dict[str, Any]:
    import torch  # noqa: F401  (the engine's GEMM backend: a one-off import, kept out of the clock)

    from headstab.activations.reader import open_cache
    from headstab.similarity.null_pairs import null_pair_similarity_from_caches
    from headstab.similarity.pairs import pair_similarity_from_caches, write_pair_similarity
    from headstab.similarity.prompt_groups import null_partners

    start, seconds = time.perf_counter(), {}
    for promptset in promptsets:
        begin = time.perf_counter()
        similarity = pair_similarity_from_caches(caches, promptset, prompt_chunk=prompt_chunk, progress=False)
        null = partners = None
        if promptset == "primary":  # rule pair_similarity writes the null on the primary prompts
            with open_cache(caches[0]) as cache:
                partners = null_partners(cache.lengths(promptset), 0)
            null_begin = time.perf_counter()
            null = null_pair_similarity_from_caches(caches, promptset, partners, progress=False)
            seconds["primary_null"] = time.perf_counter() - null_begin
        write_pair_similarity(
            out_dir / f"{promptset}.h5",
            similarity,
            list(range(1, len(caches) + 1)),
            attrs={"promptset": promptset},
            null=null,
            partners=partners,
        )
        seconds[promptset] = time.perf_counter() - begin
    return {"seconds": time.perf_counter() - start, "by_promptset": seconds}


def tables_job(similarity_dir: Path, out_dir: Path, promptsets: list[str], ddof: int) -> dict[str, Any]:
    import pandas as pd

    import headstab.stability
    from headstab.similarity.pairs import read_pair_similarity
    from headstab.stability import TABLE_NAMES, stability_tables

    start = time.perf_counter()
    collected: dict[str, list[Any]] = {name: [] for name in TABLE_NAMES}
    with (
        common.TimedCalls(headstab.stability, "one_to_one_assignment") as assignment,
        common.TimedCalls(headstab.stability, "assigned_values") as gather,
    ):
        for promptset in promptsets:
            similarity, seeds = read_pair_similarity(similarity_dir / f"{promptset}.h5")
            for name, table in stability_tables(similarity, seeds, promptset, ddof=ddof).items():
                collected[name].append(table)
    rows = {}
    for name, tables in collected.items():
        table = pd.concat(tables, ignore_index=True)
        table.to_csv(out_dir / f"{name}.csv", index=False)
        rows[name] = len(table)
    one_to_one = assignment.seconds + gather.seconds
    return {"seconds": time.perf_counter() - start, "rows": rows, "one_to_one_seconds": one_to_one}


def _child(args: list[str], timeout: float) -> tuple[dict[str, Any], float]:
    return common.run_json_child(Path(__file__).resolve(), args, timeout)


def bench_paper_scale(
    work_dir: Path,
    n_refits: int = 50,
    n_distinct: int = 4,
    n_primary: int | None = None,
    n_sweep: int = 20,
    architecture: str = "l8_h16",
    timeout: float = 1800.0,
) -> dict[str, Any]:
    from headstab.plan.config import load_config

    config = load_config(common.REPO / "config" / "config.yaml")
    lengths = paper_lengths(n_primary, n_sweep)
    write_s, paths = common.timed(
        lambda: write_caches(work_dir / "caches", n_refits, n_distinct, lengths, architecture)
    )
    log.info("wrote %d %s caches (%d distinct) in %.0f s", n_refits, architecture, n_distinct, write_s)
    os.sync()  # otherwise the kernel writes them back during the timed runs
    promptsets = list(lengths)
    (work_dir / "similarity").mkdir()
    (work_dir / "tables").mkdir()
    similarity, similarity_rss = _child(
        [
            "--similarity-job",
            str(work_dir / "similarity"),
            ",".join(promptsets),
            str(config["similarity"]["prompt_chunk"]),
            *map(str, paths),
        ],
        timeout,
    )
    tables, tables_rss = _child(["--tables-job", str(work_dir / "similarity"), str(work_dir / "tables"), ",".join(promptsets),
                                 str(config["analysis"]["layer_std_ddof"])], timeout)  # fmt: skip
    log.info("paper scale: similarity %.0f s, tables %.0f s", similarity["seconds"], tables["seconds"])
    primary = np.asarray(lengths["primary"])
    analysis = similarity["seconds"] + tables["seconds"]
    return {
        "paper_scale_analysis_seconds": analysis,
        "paper_scale_one_to_one_seconds": tables["one_to_one_seconds"],
        "paper_scale_one_to_one_fraction": tables["one_to_one_seconds"] / analysis,
        "paper_scale_similarity_seconds": similarity,
        "paper_scale_tables_seconds": tables,
        "paper_scale_peak_rss_gb": {"pair_similarity": similarity_rss, "stability_tables": tables_rss},
        "paper_scale_cache_write_seconds": write_s,
        "paper_scale_setup": (
            f"{architecture} (config/config.yaml), {n_refits} random-init refits ({n_distinct} distinct caches, the rest "
            f"symlinks); primary: {len(primary)} prompts of {primary.min()}-{primary.max()} tokens (median "
            f"{int(np.median(primary))}, BOS included; word counts of resources/prompts/primary.json x 4/3); "
            f"length sweep: {n_sweep} prompts each of {', '.join(map(str, SWEEP_TOKENS))} tokens + BOS; "
            "pair_similarity (cross_layer, every prompt set, files written) then stability_tables (CSV written), "
            "each in a fresh child process, imports outside the clock"
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    parser.add_argument("--similarity-job", nargs="+", metavar=("OUT PROMPTSETS CHUNK", "CACHE"), help="child")
    parser.add_argument("--tables-job", nargs=4, metavar=("SIMILARITY", "OUT", "PROMPTSETS", "DDOF"), help="child")
    args = parser.parse_args(argv)
    if args.similarity_job:
        out, promptsets, chunk, *caches = args.similarity_job
        print(json.dumps(similarity_job(caches, Path(out), promptsets.split(","), int(chunk))))
        return
    if args.tables_job:
        similarity, out, promptsets, ddof = args.tables_job
        print(json.dumps(tables_job(Path(similarity), Path(out), promptsets.split(","), int(ddof))))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-"))
    try:
        sizes = {"n_refits": 3, "n_distinct": 2, "n_primary": 4, "n_sweep": 2} if args.quick else {}
        results = bench_paper_scale(work_dir, **sizes)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
