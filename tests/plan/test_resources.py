"""Resource requests (headstab.plan.resources), checked against numbers worked out by hand for the paper."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from headstab.plan.config import architecture_spec, load_config
from headstab.plan.resources import (
    cache_mem_mb,
    head_type_mem_mb,
    head_type_runtime,
    meta_sne_mem_mb,
    model_gpus,
    neuron_accumulator_mb,
    neuron_statistics_mem_mb,
    similarity_mem_mb,
    similarity_runtime,
    tokens_per_second,
    train_mem_mb,
    train_runtime,
    train_tokens,
)

PAPER = Path(__file__).resolve().parents[2] / "config/config.yaml"
C4_TOKENS = 1_657_102 * 1024  # the whole c4-code-tokenized-2b set, one epoch


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER)


def test_one_epoch_of_c4_per_refit_at_the_calibrated_rates_of_a_job_of_five(paper):
    corpus, k = paper["corpora"]["c4_code_2b"], paper["training"]["seeds_per_job"]
    assert k == 5
    for arch, rate in (("l2_h8", 530_000), ("l2_h16_attn", 473_000), ("l4_h16_attn_wd", 419_000), ("l8_h16", 340_000)):
        spec = architecture_spec(paper, arch)
        assert train_tokens(spec, corpus) == C4_TOKENS
        assert tokens_per_second(arch, paper["compute"]["train_tokens_per_second"]) == rate
        assert train_runtime(spec, corpus, paper["compute"], k) == math.ceil(1.5 * 5 * C4_TOKENS / rate / 60) + 10
    # 1.5 x 5 x 1,696,872,448 tokens / 530,000 per second = 24,012.3 s = 400.2 minutes, + 10
    assert train_runtime(architecture_spec(paper, "l2_h8"), corpus, paper["compute"], k) == 411
    assert train_runtime(architecture_spec(paper, "l8_h16"), corpus, paper["compute"], k) == 634


def test_a_job_of_k_refits_asks_k_times_the_tokens_and_memory(paper, tiny_spec):
    spec, corpus, compute = architecture_spec(paper, "l4_h8"), paper["corpora"]["c4_code_2b"], paper["compute"]
    minutes = [train_runtime(spec, corpus, compute, k) - 10 for k in (1, 2, 4)]
    assert (
        minutes[1] in (2 * minutes[0] - 1, 2 * minutes[0], 2 * minutes[0] + 1) and abs(minutes[2] - 4 * minutes[0]) <= 3
    )
    one, four = train_mem_mb(spec, "auto", 1), train_mem_mb(spec, "auto", 4)
    assert 4 * (one - 3500) <= four - 3000 <= 4 * (one - 3000)  # the 3 GB base once, rounded up to 500 MB


def test_rate_lookup_prefers_the_name_then_the_longest_prefix_then_default():
    rates = {"default": 1.0, "l4": 2.0, "l4_h16": 3.0, "gpt2": 4.0}
    assert tokens_per_second("l4_h16_attn", rates) == 3.0
    assert tokens_per_second("l4_h8", rates) == 2.0
    assert tokens_per_second("gpt2", rates) == 4.0
    assert tokens_per_second("gpt2_wd", rates) == 4.0
    assert tokens_per_second("l8_h8", rates) == 1.0


def test_a_token_budget_wins_over_the_corpus_size(tiny_spec):
    assert train_tokens(tiny_spec(n_tokens=640), {"n_tokens": None}) == 640
    assert train_tokens(tiny_spec(epochs=2), {"n_tokens": 100}) == 200
    assert train_tokens(tiny_spec(), {"n_tokens": None, "expected_tokens": None}) == 9_000_000_000


def test_training_memory_of_l8_h16_on_a_gpu_is_two_full_states(paper):
    spec = architecture_spec(paper, "l8_h16")
    weights = 8 * (4 * 512 * 16 * 64 + 2 * 512 * 2048) + 2 * 48262 * 512 + 1024 * 512  # 83,499,008
    assert weights == 83_499_008
    # 3 GB base + 2 copies x (weights + 2 Adam moments) x 4 bytes = 3,000 + 2,004 MB, rounded up to 500
    assert train_mem_mb(spec, device="auto") == 5500
    assert train_mem_mb(spec, device="cpu") > 5500  # plus one step's activations
    # five refits in one job: 3,000 + 5 x 2,004 = 13,020 MB, rounded up to 13,500
    assert train_mem_mb(spec, device="auto", seeds_per_job=5) == 13500


def test_cache_memory_counts_patterns_of_the_largest_set(tiny_spec):
    spec = tiny_spec()  # 2 layers x 2 heads, d_model 16, d_head 8, n_ctx 16
    small = cache_mem_mb(spec, batch_size=1, n_resid_hooks=1, largest_prompt_set=1)
    large = cache_mem_mb(spec, batch_size=1, n_resid_hooks=1, largest_prompt_set=10**6)
    # 3 GB base plus under 1 MB of weights and activations rounds up to 3,500; 10^6 prompts x 2 layers
    # x 2 heads x 136 lower entries x 4 bytes add 2,176 MB: 5,176 MB, rounded up to 5,500
    assert small == 3500 and large == 5500


def test_head_type_memory_and_runtime_by_hand(tiny_spec):
    spec = tiny_spec(n_layers=8, n_heads=16)
    # batch 1000 x 100 x 100: patterns 8 x 16 x 1e7 x 4 bytes x 2 = 10,240 MB, one layer's float64 scores
    # 16 x 1e7 x 24 = 3,840 MB, 3 GB base: 17,080 MB plus the tiny weights, rounded up to 17,500
    assert head_type_mem_mb(spec, batch_size=1000, length=100) == 17_500
    assert head_type_runtime(spec, n_seeds=4) == 20 and head_type_runtime(spec, n_seeds=200) == 60


def test_gpus_runtimes_and_meta_sne_memory(tiny_spec):
    assert model_gpus("cpu") == 0 and model_gpus("auto") == model_gpus("cuda") == 1
    assert similarity_runtime(tiny_spec(n_layers=8, n_heads=16), n_seeds=50) == 120  # 6,400 rows
    assert similarity_runtime(tiny_spec(), n_seeds=2) == 20
    # descriptions 4 x 8 bytes (raw, normalised, t-SNE's copies); the Mantel test's 4 n x n float64 arrays
    assert meta_sne_mem_mb(n_heads_total=1000, n_prompts=100) == 2000 + int(1000 * 4950 * 32 / 1e6) + 32
    assert meta_sne_mem_mb(n_heads_total=10000, n_prompts=100, mantel_heads=2000) == (
        2000 + int(10000 * 4950 * 32 / 1e6) + int(2000**2 * 32 / 1e6)
    )


def test_similarity_memory_covers_the_nulls_three_layer_blocks_by_hand(tiny_spec):
    assert similarity_mem_mb(tiny_spec(), n_seeds=4, prompt_chunk=10, null_prompts=100) == 2000  # the floor
    big = tiny_spec(n_layers=8, n_heads=16, n_ctx=256)  # 32,896 entries a prompt
    rows = 50 * 8 * 16
    block, gram = rows * 10 * 32896 * 4, rows * rows * 8 * 3
    assert similarity_mem_mb(big, 50, 10) == int((block + gram) / 1e6 * 1.5) + 1000
    null_block = 3 * 50 * 16 * 100 * 32896 * 4  # one layer of every refit and prompt, three times
    expected = int((null_block + rows * rows * (8 * 3 + 4)) / 1e6 * 1.5) + 1000
    assert similarity_mem_mb(big, 50, 10, null_prompts=100) == expected
    assert similarity_mem_mb(big, 50, 10, null_prompts=5) == int((block + rows * rows * 28) / 1e6 * 1.5) + 1000


def test_neuron_accumulators_are_the_librarys_bytes_and_a_pass_bounds_the_cpu_memory(paper):
    from headstab.neurons.streamed import accumulator_bytes

    gpt2 = architecture_spec(paper, "gpt2")  # 12 layers of 3072 neurons
    for scope in ("same_layer", "cross_layer"):
        assert neuron_accumulator_mb(gpt2, scope) == accumulator_bytes(12, 3072, scope) / 1e6
    assert neuron_accumulator_mb(gpt2, "cross_layer") == pytest.approx(12_683, abs=1)  # 10.9 GB + 1.8 GB
    # 5 refits: 10 pairs on the CPU, or 3 a pass within 40 GB; on a GPU the host holds one pair's copy
    null_block = 12 * 3072**2 * 8 * 4 / 1e6
    models = 5 * gpt2.n_params * 4 / 1e6
    expected = {10: 3000 + 1.2 * (10 * 12_683.2 + null_block) + models}
    expected[3] = expected[10] - 1.2 * 7 * 12_683.2
    expected[1] = expected[10] - 1.2 * 9 * 12_683.2
    assert neuron_statistics_mem_mb(gpt2, 5, "cross_layer", "cpu") == 500 * math.ceil(expected[10] / 500)
    assert neuron_statistics_mem_mb(gpt2, 5, "cross_layer", "cpu", 40) == 500 * math.ceil(expected[3] / 500)
    assert neuron_statistics_mem_mb(gpt2, 5, "cross_layer", "cuda") == 500 * math.ceil(expected[1] / 500)
    assert neuron_statistics_mem_mb(gpt2, 5, "cross_layer", "cpu", 1) == neuron_statistics_mem_mb(
        gpt2, 5, "cross_layer", "cuda"
    )
