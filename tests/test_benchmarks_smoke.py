"""Smoke tests of benchmarks/: every benchmark's code path runs on toy sizes, and the plain-loop
reference agrees with the engine. They assert agreement and structure, never timings."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_similarity  # noqa: E402
import common  # noqa: E402
import run_all  # noqa: E402
from tolerances import reduction_atol, reduction_rtol  # noqa: E402


def test_loop_reference_agrees_with_engine_with_padding():
    lengths = np.array([6, 3, 5])
    patterns = [common.synthetic_patterns(seed, 2, 3, 4, 6, lengths) for seed in (1, 2, 3)]
    loop = common.loop_pair_similarity(patterns, lengths, anchor=1)
    engine = common.engine_pair_similarity(patterns, lengths, anchor=1)
    assert loop.shape == engine.shape == (2, 2, 4, 4)
    atol = reduction_atol(np.float32, 3 * 6 * 6)  # dot products over prompt x padded square
    np.testing.assert_allclose(engine, loop, atol=atol)
    np.testing.assert_allclose(
        common.head_stability_from_pairs(engine), common.head_stability_from_pairs(loop), atol=atol
    )


def test_loop_reference_gives_one_for_a_refit_compared_with_its_copy():
    lengths = np.array([5, 5])
    pattern = common.synthetic_patterns(7, 1, 2, 3, 5, lengths)
    loop = common.loop_pair_similarity([pattern, pattern.copy()], lengths)
    atol = reduction_atol(np.float32, 2 * 5 * 5)
    np.testing.assert_allclose(np.diagonal(loop[0, 0]), 1.0, atol=atol)
    np.testing.assert_allclose(common.head_stability_from_pairs(loop), 1.0, atol=atol)


def test_synthetic_patterns_are_causal_rows_summing_to_one_inside_lengths():
    lengths = np.array([4, 2])
    pattern = common.synthetic_patterns(0, 2, 2, 3, 4, lengths)
    assert pattern.shape == (2, 2, 3, 4, 4) and pattern.dtype == np.float32
    assert np.all(np.triu(pattern, k=1) == 0)
    np.testing.assert_allclose(pattern[:, 0].sum(-1), 1.0, rtol=reduction_rtol(np.float32, 4))
    np.testing.assert_allclose(pattern[:, 1, :, :2].sum(-1), 1.0, rtol=reduction_rtol(np.float32, 2))
    assert np.all(pattern[:, 1, :, 2:] == 0) and np.all(pattern[:, 1, :, :, 2:] == 0)


def test_bench_loop_runs_on_toy_sizes_and_agrees():
    result = bench_similarity.bench_loop(n_refits=3, n_prompts=2, n_pos=8, engine_repeats=1)
    assert result["similarity_max_abs_diff"] <= 1e-5
    assert result["similarity_vs_loop"] > 0 and not result["similarity_loop_extrapolated"]


def test_bench_loop_extrapolates_and_says_so_when_the_loop_is_too_slow():
    result = bench_similarity.bench_loop(n_refits=2, n_prompts=3, n_pos=8, engine_repeats=1, loop_time_limit=0.0)
    assert result["similarity_loop_extrapolated"] and result["similarity_loop_prompts_timed"] == 1
    assert result["similarity_max_abs_diff"] <= 1e-5


def test_streamed_caches_match_in_memory_engine(tmp_path):
    # Caches through headstab's own writer; the streaming worker's tensor equals the engine's.
    paths = common.write_synthetic_caches(tmp_path, 3, 2, 3, n_prompts=4, n_pos=6, n_distinct=2)
    assert paths[2].is_symlink() and paths[2].resolve() == paths[0].resolve()
    result = bench_similarity.stream_worker([str(p) for p in paths], "primary", prompt_chunk=3, gemm_rate=False)
    assert result["shape"] == [3, 3, 2, 3, 3]
    assert result["useful_flops"] == 2 * (3 * 3) ** 2 * 4 * (6 * 7 / 2)
    assert math.isclose(result["self_similarity_mean"], 1.0, rel_tol=1e-5)


def test_child_peak_rss_is_the_childs_own():
    code, peak_gb, stdout = common.run_child_measuring_rss(
        ["-c", "import numpy as np; a = np.ones(300 * 2**20 // 8); print('{\"ok\": %d}' % a.size)"]
    )
    assert code == 0 and common.last_json_line(stdout) == {"ok": 300 * 2**20 // 8}
    assert 0.28 < peak_gb < 2.0


def test_cache_benchmark_patterns_equal_the_loop(tmp_path):
    bench_cache = pytest.importorskip("bench_cache")
    result = bench_cache.bench_cache(tmp_path, repeats=1, n_prompts=3)
    assert result["cache_max_abs_diff"] <= 1e-6
    assert result["cache_batched_seconds"] > 0 and result["cache_loop_seconds"] > 0


def test_train_benchmark_runs_both_loops(tmp_path):
    bench_train = pytest.importorskip("bench_train")
    result = bench_train.bench_train(tmp_path, repeats=1, steps=2)
    assert result["train_tokens_per_second"] > 0 and result["train_transformer_lens_tokens_per_second"] > 0
    assert (tmp_path / "ours0" / "final.pt").is_file() and (tmp_path / "theirs0" / "model_0.pt").is_file()


def test_targets_are_checked_by_direction():
    summary = {key: None for key in run_all.TARGETS}
    summary |= {"similarity_vs_loop": 150.0, "similarity_max_abs_diff": 2e-5, "similarity_gemm_fraction": float("nan")}
    targets = run_all.check_targets(summary)
    assert targets["similarity_vs_loop"]["met"] is True
    assert targets["similarity_max_abs_diff"]["met"] is False
    assert targets["similarity_gemm_fraction"]["met"] is None and targets["demo_wall_seconds"]["met"] is None
    summary["targets"] = targets
    table = run_all.format_table(summary)
    assert "similarity_vs_loop" in table and "NO" in table and "null" in table


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_streaming_from_caches_equals_in_memory_engine_with_mixed_lengths(tmp_path, scope):
    # Prompts of mixed lengths exercise the packed lower triangles and the uneven prompt chunks.
    from headstab.caches import open_cache, write_activation_cache
    from headstab.similarity import (
        causal_pattern_features,
        pair_similarity,
        pair_similarity_from_caches,
        same_layer_pair_similarity,
    )

    rng = np.random.default_rng(3)
    token_lists = [[0] + rng.integers(1, 50, size=n - 1).tolist() for n in (7, 3, 9, 5, 2, 8, 4)]
    paths = []
    for seed in (1, 2, 3):
        path = tmp_path / f"seed{seed}.h5"
        model = common.SyntheticPatternModel(seed, n_layers=2, n_heads=3, n_ctx=16)
        write_activation_cache(path, model, {"primary": token_lists}, pad_token_id=0, batch_size=3, show_progress=False)
        paths.append(path)
    streamed = pair_similarity_from_caches(paths, "primary", prompt_chunk=3, progress=False, scope=scope)
    features = []
    for path in paths:
        with open_cache(path) as cache:
            features.append(causal_pattern_features(cache.attn_pattern("primary"), cache.lengths("primary")))
    features = np.stack(features)
    expected = same_layer_pair_similarity(features) if scope == "same_layer" else pair_similarity(features)
    assert streamed.shape == expected.shape
    # float32 dot products over every prompt's lower triangle (prompt x n_lower terms of the padded features)
    np.testing.assert_allclose(streamed, expected, atol=reduction_atol(np.float32, features.shape[-2] * features.shape[-1]),
                               rtol=0)


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
    with h5py.File(tmp_path / "similarity" / "caches_checksum_True" / "seed1.h5") as checked, \
            h5py.File(tmp_path / "similarity" / "caches_checksum_False" / "seed1.h5") as unchecked:
        assert checked["primary/attn_pattern"].fletcher32 and not unchecked["primary/attn_pattern"].fletcher32


def test_handwritten_comparison_extracts_the_baseline_sources(tmp_path):
    import subprocess

    bench_handwritten = pytest.importorskip("bench_handwritten")
    try:
        source = bench_handwritten.extract_baseline(bench_handwritten.BASELINE, tmp_path)
    except subprocess.CalledProcessError:
        pytest.skip("the baseline commit is not in this checkout's history")
    caches = (source / "headstab" / "caches.py").read_text()
    assert "write_direct_chunk" in caches and "preadv" in caches  # the hand-written machinery it measures
