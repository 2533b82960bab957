"""Cross-layer stability against its null (§3.3, §4.2): the sign-flip test over an anchor's pair refits of the best
match among every layer's heads against the same maximum on the prompt-permutation null.

The data are attention patterns, not similarities (`attention_blocks`): BOS and recent keys favoured alike in
every refit, each head's own position habit (so its patterns on two prompts are alike, as real heads' are),
layers of different sharpness and refit-specific layer offsets of mean zero over refits, and a response to each
prompt that under H0 is the refit's own. Heads that respond to token identity are not H0: whatever their rules,
they all weigh equal tokens equally, and the test finds that agreement (about +0.01 above the null). Prompts of a
few lengths, so most null partners share the length and some are cut to a shorter one. The similarity
tensors come from the project's engine (normalize_lower_features, GramAccumulator, null_pair_similarity) and the
test from `headstab.statistics.cross_layer_null.add_cross_layer_null`.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from calibration.harness import Case, PowerCase
from headstab.activations.packing import lower_triangle_offsets
from headstab.similarity.null_pairs import null_pair_similarity
from headstab.similarity.pairs import GramAccumulator, gram_to_pair_similarity, normalize_lower_features
from headstab.similarity.prompt_groups import null_partners
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.cross_layer_null import add_cross_layer_null, cross_layer_best

N_HEADS, N_PROMPTS, LENGTHS = 2, 8, (6, 7, 8)
N_SIGNS = 1000
LAYER_COUNTS = (2, 4, 8, 16, 24)


def attention_blocks(
    rng: np.random.Generator, n_refits: int, n_layers: int, shared: float = 0.0, positional: float = 0.0
) -> tuple[list[np.ndarray], np.ndarray]:
    """(blocks [layer] of float32 [refit * head, entry] packed causal patterns, lengths [prompt]).

    Logits: the layer's position bias (BOS, the previous token, noise; the same in every refit) + each head's own
    position rule (the same on every prompt) + scale * the head's response to the prompt, a random field per
    prompt of which the fraction `shared` is common to every refit (0 under H0). positional: the weight of a
    position rule of head 0 that every refit shares (a positional head when large)."""
    lengths = rng.choice(LENGTHS, size=N_PROMPTS)
    t = max(LENGTHS)
    layer_scale = rng.uniform(0.5, 3.0, size=n_layers)  # sharper and broader layers
    offsets = rng.normal(scale=0.3, size=(n_refits, n_layers))
    scale = layer_scale * np.exp(offsets - offsets.mean(axis=0))  # refit-specific offsets of mean zero
    bias = rng.normal(scale=0.5, size=(n_layers, 1, t, t)) + 2.0 * (np.arange(t) == 0) + np.eye(t, k=-1)
    bias = bias + rng.normal(size=(n_refits, n_layers, N_HEADS, t, t))  # each head's own position habit
    bias[:, :, 0] += positional * rng.normal(size=(n_layers, t, t))  # head 0's rule, the same in every refit
    segments = []
    for length in lengths:
        common = rng.normal(size=(1, n_layers, N_HEADS, length, length))
        own = rng.normal(size=(n_refits, n_layers, N_HEADS, length, length))
        response = np.sqrt(shared) * common + np.sqrt(1.0 - shared) * own
        logits = scale[:, :, None, None, None] * response + bias[..., :length, :length]
        logits = np.where(np.tri(length, dtype=bool), logits, -np.inf)
        pattern = np.exp(logits - logits.max(axis=-1, keepdims=True))
        pattern /= pattern.sum(axis=-1, keepdims=True)
        segments.append(pattern[..., *np.tril_indices(length)])  # [refit, layer, head, entry]
    packed = np.concatenate(segments, axis=-1).astype(np.float32)
    blocks = [np.ascontiguousarray(packed[:, layer].reshape(n_refits * N_HEADS, -1)) for layer in range(n_layers)]
    return blocks, lengths


def observed_and_null(blocks: list[np.ndarray], lengths: np.ndarray, n_refits: int, seed: int):
    """(S, S0, partners) of the blocks through the project's engine."""
    offsets = lower_triangle_offsets(lengths)
    features = np.stack([block.reshape(n_refits, N_HEADS, -1) for block in blocks], axis=1)
    features = np.ascontiguousarray(features.reshape(n_refits * len(blocks) * N_HEADS, -1))
    normalize_lower_features(features, offsets, lengths.size)
    gram = GramAccumulator(features.shape[0])
    gram.add(features)
    observed = gram_to_pair_similarity(gram.gram, n_refits, len(blocks), N_HEADS)
    partners = null_partners(lengths, seed)
    return observed, null_pair_similarity(blocks, offsets, lengths, partners, n_refits), partners


def cross_layer_tests(rng: np.random.Generator, n: int, n_layers: int, **planted) -> dict[str, np.ndarray]:
    """The cross-layer kinds of one simulated study of n refits: "cross_layer" and "cross_layer_null" with the tests."""
    blocks, lengths = attention_blocks(rng, n, n_layers, **planted)
    seed = int(rng.integers(2**31))
    observed, null, partners = observed_and_null(blocks, lengths, n, seed)
    resamples = draw_resamples(2, n, 1, seed)
    kinds = {"cross_layer": stability_replicates(resamples, best=cross_layer_best(observed))}
    add_cross_layer_null(kinds, resamples, (null, partners), SimpleNamespace(partners=partners), N_SIGNS, seed)
    return kinds


def _head_p(n_layers: int, positional: float = 0.0, head: int | None = None):
    """p of one head of anchor 0 (`head`, else a random one) in a random layer; shared: `effect` (0 without)."""

    def simulate(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
        tests = cross_layer_tests(rng, n, n_layers, shared=effect, positional=positional)["cross_layer_null"]
        chosen = int(rng.integers(N_HEADS)) if head is None else head
        return float(tests["head_p_value"][0, int(rng.integers(n_layers)), chosen])

    return simulate


def _layer_p(rng: np.random.Generator, n: int) -> float:
    tests = cross_layer_tests(rng, n, 8)["cross_layer_null"]
    return float(tests["anchor_layer_p_value"][0, int(rng.integers(8))])


CASES = [
    Case("cross_layer_sign_flip", f"exchangeable_heads_{n_layers}_layers", "size", _head_p(n_layers), reps=400,
         quick_n=8, quick_reps=80)
    for n_layers in LAYER_COUNTS
]  # fmt: skip
CASES += [
    Case("cross_layer_sign_flip", "layer_means_8_layers", "size", _layer_p, reps=400, quick_n=8, quick_reps=80),
    Case("cross_layer_sign_flip", "positional_head_8_layers", "size", _head_p(8, positional=4.0, head=0), reps=400,
         quick_n=8, quick_reps=80),
]  # fmt: skip
POWER = [
    PowerCase(
        "cross_layer_sign_flip",
        "a head's cross-layer stability is above its null",
        "shared fraction of the content rule",
        _head_p(8),
        effects=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8),
        reps=200,
    )
]
