"""Smoke tests of benchmarks/: every benchmark's code path runs on toy sizes, and the engine agrees with
the plain loop of tests/helpers/reference.py. They assert agreement and structure, never timings."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_similarity  # noqa: E402
import common  # noqa: E402
import run_all  # noqa: E402
from helpers.tolerances import reduction_atol, reduction_rtol  # noqa: E402


def test_bench_agreement_runs_on_toy_sizes_and_agrees(tmp_path):
    result = bench_similarity.bench_agreement(tmp_path, n_refits=3, n_prompts=2, n_pos=8, anchor=1)
    assert result["similarity_max_abs_diff"] <= 1e-5
    assert set(result["similarity_max_abs_diff_by_scope"]) == {"cross_layer", "same_layer"}
    assert result["similarity_loop_seconds"] > 0


def test_loop_reference_gives_one_for_a_refit_compared_with_its_copy(tmp_path):
    from helpers.reference import loop_pair_similarity

    from headstab.activations.reader import open_cache

    path = common.write_synthetic_caches(tmp_path, 1, 1, 2, n_prompts=2, n_pos=5)[0]
    with open_cache(path) as cache:
        pattern, lengths = cache.hook_pattern("primary"), cache.lengths("primary")
    loop = loop_pair_similarity([pattern, pattern.copy()], lengths, anchors=[0])
    atol = reduction_atol(np.float32, 2 * 5 * 5)
    np.testing.assert_allclose(np.einsum("lhlh->lh", loop[0, 1]), 1.0, atol=atol)
    np.testing.assert_allclose(loop[0, 1].reshape(2, 2).max(axis=-1), 1.0, atol=atol)  # best match: itself


def test_synthetic_caches_hold_causal_rows_summing_to_one_inside_lengths(tmp_path):
    from headstab.activations.reader import open_cache

    path = common.write_synthetic_caches(tmp_path, 1, 2, 3, n_prompts=2, n_pos=4)[0]
    with open_cache(path) as cache:
        pattern = cache.hook_pattern("primary")
    assert pattern.shape == (2, 2, 3, 4, 4) and pattern.dtype == np.float32
    assert np.all(np.triu(pattern, k=1) == 0)
    np.testing.assert_allclose(pattern.sum(-1), 1.0, rtol=reduction_rtol(np.float32, 4))


def test_streamed_caches_match_in_memory_engine(tmp_path):
    # Caches through headstab's own writer; the streaming worker's tensor equals the engine's.
    paths = common.write_synthetic_caches(tmp_path, 3, 2, 3, n_prompts=4, n_pos=6, n_distinct=2)
    assert paths[2].is_symlink() and paths[2].resolve() == paths[0].resolve()
    result = bench_similarity.stream_worker([str(p) for p in paths], "primary", prompt_chunk=3, gemm_rate=False)
    assert result["shape"] == [3, 3, 2, 3, 3]
    assert result["useful_flops"] == 2 * (3 * 3) ** 2 * 4 * (6 * 7 / 2)
    assert math.isclose(result["self_similarity_mean"], 1.0, rel_tol=1e-5)


def test_child_peak_rss_is_the_childs_own():
    parent = np.ones(1200 * 2**20 // 8)  # the parent's RSS, which a forked child's ru_maxrss would carry over
    code, peak_gb, stdout = common.run_child_measuring_rss(
        ["-c", "import numpy as np; a = np.ones(300 * 2**20 // 8); print('{\"ok\": %d}' % a.size)"]
    )
    assert code == 0 and common.last_json_line(stdout) == {"ok": 300 * 2**20 // 8}
    assert 0.28 < peak_gb < 1.0 < parent.nbytes / 2**30


def test_cache_benchmark_stores_what_the_loop_computes(tmp_path):
    bench_cache = pytest.importorskip("bench_cache")
    result = bench_cache.bench_cache(tmp_path, repeats=1, n_prompts=3)
    assert result["cache_max_abs_diff"] <= 1e-6
    for hook, entry in result["cache_max_abs_diff_by_hook"].items():  # a few float32 ulps of the hook's scale
        assert entry["max_abs_diff"] <= 16 * np.finfo(np.float32).eps * entry["max_abs_value"], hook
    assert result["cache_overhead"] > 0 and result["cache_overhead_gzip1"] > 0
    assert all(len(runs) == 1 for runs in result["cache_seconds"].values())


def test_paper_scale_benchmark_runs_both_jobs(tmp_path):
    bench_paper_scale = pytest.importorskip("bench_paper_scale")
    lengths = bench_paper_scale.paper_lengths()
    assert len(lengths["primary"]) == 100 and 21 < min(lengths["primary"]) and max(lengths["primary"]) < 90
    result = bench_paper_scale.bench_paper_scale(
        tmp_path, n_refits=3, n_distinct=2, n_primary=2, n_sweep=1, architecture="l2_h8_attn"
    )
    assert result["paper_scale_analysis_seconds"] > 0
    assert result["paper_scale_tables_seconds"]["rows"]["layer_stability"] > 0
    assert set(result["paper_scale_similarity_seconds"]["by_promptset"]) == set(lengths)
    assert 0 < result["paper_scale_one_to_one_seconds"] < result["paper_scale_analysis_seconds"]
    assert result["paper_scale_one_to_one_fraction"] < 1


def test_head_types_benchmark_times_the_probe_scores_beside_the_cache_stage():
    bench = pytest.importorskip("bench_head_types")
    result = bench.bench_head_types(architecture="l2_h8_attn", repeats=1, n_primary=2, n_sweep=1)
    assert result["head_types_seconds_per_refit"] > 0 and result["head_types_cache_seconds_per_refit"] > 0
    assert (
        result["head_types_vs_cache"]
        == result["head_types_seconds_per_refit"] / result["head_types_cache_seconds_per_refit"]
    )


def test_bootstrap_benchmark_times_the_one_to_one_part():
    bench = pytest.importorskip("bench_bootstrap")
    result = bench.bench_bootstrap(n_refits=3, n_groups=2, n_boot=10)
    assert 0 < result["bootstrap_one_to_one_seconds"] < result["bootstrap_seconds"]


def test_published_cache_benchmark_writes_the_published_defaults(tmp_path):
    bench = pytest.importorskip("bench_cache_published")
    result = bench.bench_cache_published(tmp_path, architecture="l2_h8_attn", n_primary=2, n_sweep=1)
    assert result["cache_published_l2_h8_attn_seconds"] > 0 and result["cache_published_l2_h8_attn_mb"] > 0
    assert "'activation_sets': ['primary']" in result["cache_published_l2_h8_attn_setup"]
    assert {"hook_pattern", "hook_z", "hook_resid_post"} <= set(result["cache_published_l2_h8_attn_mb_by_dataset"])


def test_train_benchmark_runs_both_loops(tmp_path):
    bench_train = pytest.importorskip("bench_train")
    result = bench_train.bench_train(tmp_path, repeats=1, steps=2)
    assert result["train_tokens_per_second"] > 0 and result["train_transformer_lens_tokens_per_second"] > 0
    assert (tmp_path / "ours0" / "final.pt").is_file() and (tmp_path / "theirs0" / "model_0.pt").is_file()


def test_drop_swap_flop_ratio_counts_the_intact_pass_the_block_passes_and_one_unembedding_per_condition():
    import bench_drop_swap

    # 2 layers: block = 10 weight + 2 x 5 keys x 1 = 20, unembedding 2 x 20 = 40, intact 2 x 20 + 40 = 80;
    # conditions: 2 x 1 block passes and 3 unembeddings, 40 + 120; (80 + 160) / 80 = 3
    spec = SimpleNamespace(n_layers=2, n_params=20, n_heads=1, d_head=1, d_model=2, d_vocab=20)
    assert bench_drop_swap.flop_ratio(spec, seq_len=5) == 3.0


def test_targets_are_checked_by_direction():
    summary = {key: None for key in run_all.TARGETS}
    summary |= {"cache_overhead": 1.2, "similarity_max_abs_diff": 2e-5, "similarity_gemm_fraction": float("nan")}
    targets = run_all.check_targets(summary)
    assert targets["cache_overhead"]["met"] is True
    assert targets["similarity_max_abs_diff"]["met"] is False
    assert targets["similarity_gemm_fraction"]["met"] is None and targets["demo_wall_seconds"]["met"] is None
    summary["targets"] = targets
    table = run_all.format_table(summary)
    assert "cache_overhead" in table and "NO" in table and "null" in table


def test_checksum_overhead_benchmarks_run_both_variants(tmp_path):
    bench_cache = pytest.importorskip("bench_cache")
    cache = bench_cache.bench_checksum_overhead(tmp_path / "cache", repeats=1, n_prompts=2)
    similarity = bench_similarity.bench_checksum_overhead(tmp_path / "similarity", n_refits=2, n_prompts=2, n_pos=6,
                                                          n_distinct=1, repeats=1)  # fmt: skip
    timings = similarity["similarity_checksum_seconds"]["cross_layer"]
    assert len(timings["with"]["seconds"]) == len(timings["without"]["read_seconds"]) == 1
    assert 0 < timings["with"]["read_seconds"][0] < timings["with"]["seconds"][0]
    assert len(cache["cache_checksum_seconds"]["with"]) == 1 and min(cache["cache_checksum_seconds"]["without"]) > 0
    assert cache["cache_checksum_overhead"] > -1 and similarity["similarity_checksum_overhead"] > -1
    with (
        h5py.File(tmp_path / "similarity" / "caches_checksum_True" / "seed1.h5") as checked,
        h5py.File(tmp_path / "similarity" / "caches_checksum_False" / "seed1.h5") as unchecked,
    ):
        assert checked["primary/hook_pattern"].fletcher32 and not unchecked["primary/hook_pattern"].fletcher32


def test_training_model_benchmark_counts_ops_and_times_every_variant():
    bench = pytest.importorskip("bench_training_model")
    ops = bench.bench_ops(n_layers=1, batch_size=2, seq_len=16)
    counts = ops["training_model_ops_per_step"]
    assert counts["plain_k4"] == counts["plain"] < counts["bridge"]  # stacking seeds adds no operator
    assert ops["plain_vs_bridge_ops_per_step"] == counts["plain"] / counts["bridge"]
    assert ops["training_model_ops_by_name"]["plain"]["baddbmm"] > 0
    times = bench.bench_step_times("l2_h8_attn", steps=1, repeats=1, batch_size=2, seq_len=16)
    variants = {"bridge", "plain", "plain_sdpa", "plain_k4_per_seed", "plain_k4_sdpa_per_seed"}
    assert set(times["seconds_per_step"]) == variants
    assert all(seconds > 0 for seconds in times["seconds_per_step"].values())
