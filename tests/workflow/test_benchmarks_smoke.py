"""Smoke tests of benchmarks/: every benchmark's code path runs on toy sizes, and the engine agrees with
the plain loop of tests/helpers/reference.py. They assert agreement and structure, never timings."""

from __future__ import annotations

import json
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


def test_make_bench_quick_runs_the_cache_stage_on_the_demo_prompt_sets(tmp_path):
    """`run_all.py --quick --only cache`: the stage that reads the shipped prompt sets, each set's longest prompt
    among its quick ones (a 297-token prompt over n_ctx 256 once stopped `make bench` here); what the cache stores
    is what one forward pass per prompt computes."""
    out = tmp_path / "summary.json"
    assert run_all.main(["--quick", "--only", "cache", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    result = summary["details"]["cache"]
    assert summary["cache_max_abs_diff"] <= 1e-6
    for hook, entry in result["cache_max_abs_diff_by_hook"].items():  # a few float32 ulps of the hook's scale
        assert entry["max_abs_diff"] <= 16 * np.finfo(np.float32).eps * entry["max_abs_value"], hook
    assert summary["cache_overhead"] > 0 and result["cache_overhead_gzip1"] > 0
    assert summary["cache_published_l8_h16_seconds"] > 0 and summary["cache_checksum_overhead"] > -1
    assert "primary, len5, len10, len20, len30, len40, len50 (70 prompts" in result["cache_setup"]


def test_quick_prompts_are_spread_over_the_lengths_and_keep_the_longest():
    import bench_cache

    prompts, lengths = list("abcdefg"), [5, 90, 7, 3, 40, 300, 12]
    # length ranks 0, 3 and 6: the shortest (3), the median (12) and the longest (300), in file order
    assert bench_cache.spread_by_length(prompts, lengths, 3) == ["d", "f", "g"]
    assert bench_cache.spread_by_length(prompts, lengths, 20) == prompts


def test_paper_scale_benchmark_runs_both_jobs(tmp_path):
    bench_paper_scale = pytest.importorskip("bench_paper_scale")
    lengths = bench_paper_scale.paper_lengths()
    assert len(lengths["primary"]) == 100 and 21 < min(lengths["primary"]) and max(lengths["primary"]) < 90
    result = bench_paper_scale.bench_paper_scale(
        tmp_path, n_refits=3, n_distinct=2, n_primary=2, n_sweep=1, architecture="l2_h8_attn"
    )
    assert result["paper_scale_analysis_seconds"] > 0
    assert result["paper_scale_tables_seconds"]["rows"]["layer_stability"] > 0
    # every prompt set, and the primary set's prompt-permutation null over every layer pair on its own
    assert set(result["paper_scale_similarity_seconds"]["by_promptset"]) == set(lengths) | {"primary_null"}
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


def test_job_startup_benchmark_times_every_do_nothing_job():
    import bench_job_startup

    result = bench_job_startup.bench_job_startup(n_jobs=3)
    assert len(result["job_startup_all_seconds"]) == 3
    assert result["job_startup_seconds"] == sorted(result["job_startup_all_seconds"])[1] > 0
    assert "job_startup_seconds" in run_all.TARGETS and "job_startup" in run_all.STAGES


def test_snakemake_log_timing_pairs_each_finish_with_its_start():
    import snakemake_log_timing

    log = """[Thu Nov 26 04:41:06 2026]
localrule train:
    output: a
    jobid: 7
[Thu Nov 26 04:41:08 2026]
rule cache:
    jobid: 9
[Thu Nov 26 04:41:16 2026]
Finished jobid: 9 (Rule: cache)
[Thu Nov 26 04:41:36 2026]
Finished jobid: 7 (Rule: train)
"""
    seconds, wall = snakemake_log_timing.rule_timing(log.splitlines())
    assert seconds == {"cache": [8.0], "train": [30.0]} and wall == 30.0


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


def test_induction_benchmark_patterns_are_the_bridges_hook_pattern():
    import induction_phase_change as ipc
    import torch

    from headstab.refits.models import build_model
    from headstab.training.model import StackedTransformer

    spec = ipc.demo_spec(vocab=300, seq_len=128)
    stack = StackedTransformer.from_seeds(spec, [3, 5], attention="sdpa")
    with torch.no_grad():  # biases and LayerNorms away from their init, so every term of the pattern counts
        for name, tensor in stack.named_parameters():
            if "b_" in name or "ln" in name:
                tensor.add_(0.3 * torch.randn(tensor.shape, generator=torch.Generator().manual_seed(len(name))))
    tokens = torch.randint(0, 300, (3, 40), generator=torch.Generator().manual_seed(0))
    logits, patterns = ipc.stack_patterns(stack, tokens)
    assert patterns.shape == (2, 2, 3, 8, 40, 40)  # [layer, seed, prompt, head, query_pos, key_pos]
    for i, seed in enumerate([3, 5]):
        bridge = build_model(spec, seed)
        bridge.load_state_dict(stack.seed_state_dict(i))
        with torch.no_grad():
            expected, cache = bridge.run_with_cache(tokens)
        # logits sum d_model products of O(1) terms after LayerNorm; each pattern row sums at most 40 keys
        atol = reduction_atol(np.float32, spec.d_model, magnitude=float(expected.abs().max()))
        np.testing.assert_allclose(logits[i].numpy(), expected.numpy(), atol=atol, rtol=0)
        for layer in range(2):
            bridge_pattern = cache[f"blocks.{layer}.attn.hook_pattern"].numpy()
            np.testing.assert_allclose(
                patterns[layer, i].numpy(), bridge_pattern, atol=reduction_atol(np.float32, 40), rtol=0
            )


def test_induction_detectors_score_planted_heads_one_and_uniform_heads_their_chance():
    import induction_phase_change as ipc
    import torch

    half, n = 5, 10
    induction, prev_token, uniform = (torch.zeros(1, 1, n, n) for _ in range(3))
    for i in range(half, n):
        induction[0, 0, i, i - half + 1] = 1.0  # the token after the earlier copy of token i
    for i in range(n):
        prev_token[0, 0, i, max(i - 1, 0)] = 1.0
        uniform[0, 0, i, : i + 1] = 1.0 / (i + 1)
    probe = ipc.repeated_probe(np.arange(1, half + 1)[None])
    scores = ipc.head_scores(torch.cat([induction, prev_token, uniform], dim=1)[None], probe)
    chance_second = np.mean([1 / (i + 1) for i in range(half, n)])
    np.testing.assert_allclose(scores["induction"][0], [1.0, 0.0, chance_second])
    np.testing.assert_allclose(scores["prev_token"][0], [0.0, 1.0, np.mean([1 / (i + 1) for i in range(1, n)])])
    np.testing.assert_allclose(scores["duplicate"][0], [0.0, 0.0, chance_second])


def test_span_prompts_repeat_a_span_verbatim_at_varying_offsets_and_mark_its_induction_keys():
    import induction_phase_change as ipc

    documents = [np.arange(1000 * d, 1000 * d + 120) for d in range(1, 6)]  # distinct tokens: copies are findable
    probe = ipc.span_prompts(documents, 40, seed=1, length=(40, 80), span=(6, 16), gap=(0, 24))
    assert ((probe.lengths >= 40) & (probe.lengths <= 80)).all() and probe.tokens.shape[1] == probe.lengths.max()
    distances, starts = set(), set()
    for row, length in zip(probe.tokens, probe.lengths):
        assert (row[length:] == 0).all()
    for p, q in zip(*np.nonzero(probe.induction_key >= 0)):
        key = probe.induction_key[p, q]
        # the key is the token after the earlier occurrence of the query's token
        assert probe.tokens[p, key - 1] == probe.tokens[p, q] and key - 1 < q
        assert probe.duplicate_key[p, q] == key - 1 and probe.copy_mask[p, q + 1]
        assert probe.tokens[p, q + 1] == probe.tokens[p, key]  # induction predicts the copy's next token
        distances.add(q - key + 1)
        starts.add(key - 1)
    assert len(distances) > 10 and len(starts) > 10  # never a fixed offset or place
    assert probe.copy_mask.sum() == probe.source_mask.sum()


def test_repeated_span_windows_copy_spans_at_varying_distances():
    import induction_phase_change as ipc

    rng = np.random.default_rng(0)
    probs = ipc.zipf_probs(500, 1.0)
    assert probs[0] == 0 and np.isclose(probs.sum(), 1) and probs[1] == probs.max()
    copied, distances = 0, set()
    for _ in range(50):
        tokens, mask = ipc.repeated_span_window(rng, 128, probs, 0.4, span=(8, 16), gap=(0, 20))
        for i in np.flatnonzero(mask):
            # a copied token and its predecessor both occur earlier at the same distance
            d = next(d for d in range(2, i + 1) if tokens[i - d] == tokens[i] and tokens[i - 1 - d] == tokens[i - 1])
            distances.add(d)
        copied += mask.sum()
    assert 0.25 < copied / (50 * 128) < 0.4  # the copies minus their first tokens: under repeat_fraction 0.4
    assert len(distances) > 10  # never a fixed offset


def test_induction_benchmark_quick_mode_runs_every_data_kind_as_a_stack(tmp_path):
    import induction_phase_change as ipc

    results = ipc.main(["--quick", "--out", str(tmp_path)])
    assert [r["row"]["data"] for r in results] == ["tokens"] * 2 + ["halves"] * 2 + ["markov"] * 2 + ["text"] * 2
    assert [r["row"]["seed"] for r in results] == [1, 2] * 4
    for result in results:
        assert [row["step"] for row in result["curve"]] == [0, 2, 4]
        assert np.isfinite(result["row"]["final_train_loss"])
    text = results[-1]["curve"][-1]
    assert set(k for k in text if isinstance(text[k], dict)) == {"spans", "random", "text"}
    assert len(ipc.read_rows(tmp_path / "runs.csv")) == 8
    table = ipc.report(tmp_path)
    assert "| quick_tokens | tokens zipf 0.0, repeat 0.5, span 8-32, gap 0-32 | 300 | 32 | 2 |" in table
    assert "| quick_text | text, 2 repeated spans/doc | 300 | 32 | 2 |" in table


def test_induction_sweep_settings_are_run_configs():
    import induction_phase_change as ipc

    for settings in (s for sweep in ipc.SWEEPS.values() for s in sweep.values()):
        args = ipc.parse_args(["run", *ipc.run_flags(settings)])
        for name, value in settings.items():
            assert getattr(args, name) == (list(value) if isinstance(value, tuple) else value)


def test_induction_head_stability_is_one_for_identical_refits_and_its_null_is_lower():
    import induction_phase_change as ipc

    from headstab.activations.packing import lower_triangle_offsets
    from headstab.training.initial_weights import initial_state_dict

    spec = ipc.demo_spec(vocab=64, seq_len=128)
    documents = ipc.SyntheticStream("tokens", 64, 128).heldout_documents(n_documents=20)
    probe = ipc.span_prompts(documents, 12, seed=2)
    same = initial_state_dict(spec, 3)
    rows = ipc.induction_head_stability([same, same], spec, probe)
    assert [(r["refit"], r["layer"]) for r in rows] == [(0, 1), (1, 1)] and rows[0]["head"] == rows[1]["head"]
    # every head's best match in an identical twin is itself: a cosine of 1, up to the float32 sums over all entries
    n_entries = int(lower_triangle_offsets(probe.lengths)[-1])
    for row in rows:
        np.testing.assert_allclose(row["stability"], 1.0, atol=reduction_atol(np.float32, n_entries))
        assert row["null"] < 1.0 - reduction_atol(np.float32, n_entries)  # other prompts' patterns differ


def test_the_loops_stack_equals_refits_trained_alone_and_the_forward_the_bridges(tmp_path):
    bench = pytest.importorskip("bench_training_model")
    toy = {"batch_size": 2, "seq_len": 16}
    assert bench.bench_stack_equivalence(tmp_path / "stack", steps=3, **toy)["stack_vs_k1_max_abs_diff"] == 0.0
    forward = bench.bench_forward_vs_bridge(**toy)
    atol = reduction_atol(np.float32, 2_000, forward["stack_forward_max_abs_logit"])  # ~the path of a logit
    assert 0 <= forward["stack_forward_max_abs_diff"] <= atol
    loss = bench.bench_bf16_loss(tmp_path / "bf16", steps=2, **toy)
    assert set(loss["train_bf16_final_losses"]) == {"fp32", "bf16"} and loss["train_bf16_loss_delta_sd"] >= 0


def test_the_gpu_stage_runs_its_variants_on_toy_shapes(tmp_path):
    """On a machine without CUDA --quick runs every variant but the compiled one on the CPU."""
    bench = pytest.importorskip("bench_train_gpu")
    result = bench.bench_train_gpu(tmp_path, quick=True, device="cpu")
    variants = result["details"]["variants"]
    assert not [name for name, entry in variants.items() if "error" in entry], variants
    assert result["train_stack_speedup_k2"] > 0 and result["train_bf16_sdpa_speedup"] > 0
    spec = bench.paper_spec("l8_h8")
    # 6 x (8 layers x 3,145,728 + 512 x 48,262) + 12 x 8 x 1,024 x 512
    assert bench.flops_per_token(spec) == 6 * (25_165_824 + 24_710_144) + 12 * 8 * 1024 * 512


def test_gpu_check_runs_on_the_cpu_and_names_what_it_did_not_measure(tmp_path):
    """`make gpu-check DEVICE=cpu`: the gpu-marked tests pass (the CUDA-only ones skip), the toy training benchmark
    runs, and summary.json lists every GPU line as unmeasured."""
    import gpu_check

    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    tests = summary["pytest_gpu"]
    assert summary["device"] == "cpu" and tests["device"] == "cpu" and not tests["failed"]
    assert "test_the_stack_computes_each_refit_as_a_job_of_one" in tests["passed"]
    assert set(tests["skipped"]) == {
        "test_the_inductor_compiled_loss_equals_eager",
        "test_a_training_step_makes_no_synchronising_call",
    }
    assert summary["bench"]["quick"] is True and summary["bench"]["train_stack_speedup_k2"] > 0
    assert summary["unmeasured"] == [*gpu_check.NOT_YET_MEASURED, *gpu_check.CUDA_ONLY]
    assert "Unmeasured in this run:" in (tmp_path / "summary.md").read_text()


def test_neuron_benchmark_streams_a_demo_pair_and_reports_the_accumulators():
    bench = pytest.importorskip("bench_neurons")
    result = bench.bench_neurons(quick=True)
    # GPT-2 small (12 x 3072), float64: 3 x 12 x 3072^2 x 8 B same-layer; (36864^2 + 2 x 12 x 3072^2) x 8 B cross
    assert result["neuron_accumulator_gb_gpt2_small_same_layer"] == pytest.approx(3 * 12 * 3072**2 * 8 / 1e9)
    assert result["neuron_accumulator_gb_gpt2_small_cross_layer"] == pytest.approx(
        (36864**2 + 2 * 12 * 3072**2) * 8 / 1e9
    )
    assert result["d_mlp_gpt2_rows"] == 768
    for key in ("stream_tokens_per_s_demo_pair", "update_tokens_per_s_gpt2_layer", "null_seconds_per_gpt2_layer_draw"):
        assert result[f"neuron_{key}"] > 0
    run_all = pytest.importorskip("run_all")
    assert "neurons" in run_all.STAGES and "neuron_stream_tokens_per_s_demo_pair" in run_all.TARGETS
