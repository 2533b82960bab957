"""What each job asks of Slurm or a workstation: memory (MB), runtime (minutes) and GPUs.

Pure functions of the architecture and the config's `compute` values, so the rules stay declarative
and each estimate is tested. The estimates are generous upper bounds; docs/slurm.md says how to
calibrate `compute.train_tokens_per_second` from a finished job's benchmark file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from headstab.plan.spec import ArchitectureSpec

# Corpus size assumed when the config gives neither n_tokens nor expected_tokens (OpenWebText is
# about 9e9 gpt2 tokens); planning reads the config only, never a result file.
UNKNOWN_CORPUS_TOKENS = 9_000_000_000
# Positions assumed per prompt: the shipped prompt sets reach 221 tokens with BOS in the demo's
# 1,024-token BPE (rule check_prompts records the maxima), fewer in the paper's tokenizers.
ASSUMED_POSITIONS = 256
# Python, torch and (on a GPU node) CUDA before any tensor.
BASE_MB = 3000


def _round_up_mb(megabytes: float, step: int = 500) -> int:
    return step * math.ceil(megabytes / step)


def model_gpus(device: str) -> int:
    """One GPU for a job that runs a model, unless the run is pinned to the CPU (compute.device: cpu)."""
    return 0 if device == "cpu" else 1


def train_tokens(spec: ArchitectureSpec, corpus: Mapping[str, Any]) -> int:
    """Tokens one refit trains on: n_tokens, else epochs x the corpus size (its n_tokens, else
    expected_tokens, else UNKNOWN_CORPUS_TOKENS). corpus: the `corpora.<name>` config entry."""
    if spec.n_tokens is not None:
        return spec.n_tokens
    size = corpus.get("n_tokens") or corpus.get("expected_tokens") or UNKNOWN_CORPUS_TOKENS
    return spec.epochs * size


def tokens_per_second(arch: str, rates: Mapping[str, float]) -> float:
    """Calibrated throughput of one train job, all its refits together (compute.train_tokens_per_second): the
    architecture's own entry, else the longest key that is a `_`-separated prefix of its name (`l4` serves
    l4_h8, l4_h16_attn_wd, ...), else `default`."""
    if arch in rates:
        return rates[arch]
    prefixes = [key for key in rates if arch.startswith(f"{key}_")]
    return rates[max(prefixes, key=len)] if prefixes else rates["default"]


def train_runtime(
    spec: ArchitectureSpec, corpus: Mapping[str, Any], compute: Mapping[str, Any], seeds_per_job: int = 1
) -> int:
    """Minutes of one train job of `seeds_per_job` refits: their tokens / the job's calibrated throughput x
    compute.runtime_margin, plus 10 for start-up. A last block with fewer refits asks the same: its steps take
    no longer than a full block's."""
    rate = tokens_per_second(spec.name, compute["train_tokens_per_second"])
    return math.ceil(compute["runtime_margin"] * seeds_per_job * train_tokens(spec, corpus) / rate / 60) + 10


def train_mem_mb(spec: ArchitectureSpec, device: str, seeds_per_job: int = 1) -> int:
    """Per refit of the job: two copies of its full state (weights and Adam moments: the model's and the copy
    a checkpoint writes) and, when training on the CPU, the activations of one step."""
    n_params = spec.n_params + 2 * spec.d_vocab * spec.d_model + spec.n_ctx * spec.d_model
    state_bytes = 2 * 3 * 4 * n_params
    activation_bytes = 0
    if device == "cpu":
        per_layer = 12 * spec.d_model + 2 * spec.d_mlp + 3 * spec.n_heads * spec.seq_len
        activation_bytes = 4 * spec.tokens_per_step * (spec.n_layers * per_layer + 3 * spec.d_vocab)
    return _round_up_mb(BASE_MB + seeds_per_job * (state_bytes + activation_bytes) / 1e6)


def cache_mem_mb(spec: ArchitectureSpec, batch_size: int, n_resid_hooks: int, largest_prompt_set: int) -> int:
    """The weights, one batch of float32 activations twice (torch's and the numpy copy being written),
    and the packed lower-triangle patterns of the largest prompt set (held until written), at
    ASSUMED_POSITIONS positions."""
    n_pos = min(spec.n_ctx, ASSUMED_POSITIONS)
    per_prompt = spec.n_layers * (
        spec.n_heads * n_pos * n_pos + n_resid_hooks * n_pos * spec.d_model + n_pos * spec.n_heads * spec.d_head
    )
    activations = 2 * 4 * batch_size * per_prompt
    packed_patterns = 4 * spec.n_layers * spec.n_heads * largest_prompt_set * n_pos * (n_pos + 1) // 2
    weights = 4 * (spec.n_params + 2 * spec.d_vocab * spec.d_model)
    return _round_up_mb(BASE_MB + (activations + packed_patterns + 2 * weights) / 1e6)


def cache_runtime(spec: ArchitectureSpec) -> int:
    """Minutes: a forward pass over a few hundred prompts takes seconds on a GPU; start-up and writing
    dominate. Generous for gpt2-sized models on a CPU."""
    return 30 if spec.n_layers * spec.d_model <= 4096 else 60


def head_type_mem_mb(spec: ArchitectureSpec, batch_size: int, length: int) -> int:
    """The weights, and one batch's attention patterns of every layer: float32 from the forward pass twice
    (torch's and numpy's), float64 in the scores of one layer (the pattern and its entropy terms)."""
    patterns = spec.n_layers * spec.n_heads * batch_size * length * length
    scores = spec.n_heads * batch_size * length * length * 8 * 3
    weights = 4 * (spec.n_params + 2 * spec.d_vocab * spec.d_model)
    return _round_up_mb(BASE_MB + (2 * 4 * patterns + scores + 2 * weights) / 1e6)


def head_type_runtime(spec: ArchitectureSpec, n_seeds: int) -> int:
    """Minutes for every refit of one architecture: each loads its weights and runs a few thousand probe
    tokens, seconds on a CPU; a minute per refit of a gpt2-sized model, at least 20 in all."""
    per_refit = 0.25 if spec.n_layers * spec.d_model <= 4096 else 1.0
    return max(20, math.ceil(10 + per_refit * n_seeds))


def similarity_mem_mb(spec: ArchitectureSpec, n_seeds: int, prompt_chunk: int, null_prompts: int = 0) -> int:
    """One streamed block of every refit's packed patterns, the float64 Gram and its float32 copies; with
    null_prompts, the larger of that block and the null's (one layer's patterns of every refit and of that many
    prompts, three times: `headstab.similarity.null_pairs`), and the float32 null tensor beside the Gram."""
    rows = n_seeds * spec.n_layers * spec.n_heads
    n_pos = min(spec.n_ctx, ASSUMED_POSITIONS)
    block = rows * prompt_chunk * n_pos * (n_pos + 1) // 2 * 4
    null_block = 3 * n_seeds * spec.n_heads * null_prompts * n_pos * (n_pos + 1) // 2 * 4
    gram = rows * rows * (8 * 3 + (4 if null_prompts else 0))
    return max(2000, int((max(block, null_block) + gram) / 1e6 * 1.5) + 1000)


def similarity_runtime(spec: ArchitectureSpec, n_seeds: int) -> int:
    """Minutes for all prompt sets of one architecture: the Gram grows with the square of the rows;
    2 hours for the paper's largest (50 refits x 8 layers x 16 heads), at least 20 minutes."""
    rows = n_seeds * spec.n_layers * spec.n_heads
    return max(20, int(120 * (rows / 6400) ** 2))


def grouped_similarity_mem_mb(spec: ArchitectureSpec, n_seeds: int, n_prompts: int, n_groups: int) -> int:
    """One layer's packed patterns of every refit and prompt (held, less their position template for the
    content variant, and gathered per group twice over), plus the observed and null per-group tensors
    [group, seed, seed, layer, head, head] in float32, of the patterns and of the content variant."""
    n_pos = min(spec.n_ctx, ASSUMED_POSITIONS)
    block = n_seeds * spec.n_heads * max(n_prompts, 1) * n_pos * (n_pos + 1) // 2 * 4
    tensors = 4 * min(n_groups, max(n_prompts, 1)) * n_seeds**2 * spec.n_layers * spec.n_heads**2 * 4
    return max(2000, int((3 * block + tensors) / 1e6 * 1.5) + 1000)


def statistics_mem_mb(spec: ArchitectureSpec, n_seeds: int, n_groups: int, batch_size: int = 16) -> int:
    """The observed, null, content-variant (observed and null) and step-0 per-group tensors of one prompt
    set (the step-0 file's content variant read too), a batch of resampled similarity tensors, and the
    float64 cross-layer best matches."""
    per_pair = n_seeds**2 * spec.n_layers * spec.n_heads**2 * 4
    return max(2000, int((7 * n_groups * per_pair + 2 * batch_size * per_pair) / 1e6 * 1.5) + 1000)


def residual_cka_mem_mb(spec: ArchitectureSpec, n_seeds: int, max_tokens: int | None) -> int:
    """One layer's kept token activations and centred float64 Gram matrices of every refit (6,000
    tokens assumed when every token is kept: the paper's primary prompts are about 5,300 neox tokens)."""
    n_tokens = max_tokens or 6000
    return 2000 + int(n_seeds * n_tokens * (n_tokens * 8 * 2 + spec.d_model * 8) / 1e6)


def meta_sne_mem_mb(n_heads_total: int, n_prompts: int, mantel_heads: int | None = None) -> int:
    """Every head's description (one distance per pair of prompts, float64) four times over for t-SNE (the
    scale-normalised copy besides), and the Mantel test's four n x n float64 arrays of mantel_heads heads (all
    when None)."""
    mantel = min(n_heads_total, mantel_heads if mantel_heads is not None else n_heads_total)
    return 2000 + int(n_heads_total * (n_prompts * (n_prompts - 1) // 2) * 8 * 4 / 1e6) + int(mantel**2 * 8 * 4 / 1e6)


def neuron_accumulator_mb(spec: ArchitectureSpec, scope: str) -> float:
    """One refit pair's float64 accumulators (headstab.neurons.streamed.accumulator_bytes, without torch)."""
    per_layer = spec.n_layers * spec.d_mlp**2
    cross = (spec.n_layers * spec.d_mlp) ** 2 if scope == "cross_layer" else per_layer
    return (cross + 2 * per_layer) * 8 / 1e6


def neuron_statistics_mem_mb(
    spec: ArchitectureSpec, n_refits: int, scope: str, device: str, pass_memory_gb: float | None = None
) -> int:
    """Host memory of the neuron stream: one pass's pair accumulators on the CPU (all pairs, or as many as
    pass_memory_gb holds; on a GPU they live there and the host holds one pair's copy while it is written),
    the null's largest block and the refits' models."""
    pairs = n_refits * (n_refits - 1) // 2
    accumulator = neuron_accumulator_mb(spec, scope)
    if pass_memory_gb is not None:
        pairs = min(pairs, max(1, int(pass_memory_gb * 1e3 // accumulator)))
    held = accumulator * pairs if device == "cpu" else accumulator  # a GPU's pair copied to the host to be written
    null_block = spec.n_layers * spec.d_mlp**2 * 8 * 4 / 1e6  # rotated correlations of one partner layer
    models = n_refits * spec.n_params * 4 / 1e6
    return _round_up_mb(BASE_MB + 1.2 * (held + null_block) + models)
