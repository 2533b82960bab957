"""What a head does: previous-token, duplicate-token, induction (prefix matching), BOS (sink) and copying
scores on a probe set.

The attention scores follow Olsson et al. 2022 ("In-context learning and induction heads") and
TransformerLens's `head_detector` (`previous_token_head`, `duplicate_token_head`, `induction_head`): each is
the attention a head puts on the key that its type predicts, averaged over the queries where that key exists.
The probe set makes those keys known: seeded sequences of distinct tokens of the model's vocabulary, each with
one span of 4-12 tokens repeated later at a random offset and gap, so the only duplicate tokens are the
span's. Query q in the second copy (which starts d positions after the first) has its earlier copy at q - d
and the token after that copy at q - d + 1.

Scores per refit, layer and head (the attention scores each a mean over the probe's sequences):
- previous_token: attention from i to i - 1, over queries i >= 2 (query 1's previous key is position 0,
  which bos scores);
- duplicate_token: attention from the second copy of a token to its first, over the repeat's queries;
- induction: attention from the repeat's query q to the token after the earlier copy of q's token (Olsson
  et al.'s prefix matching);
- bos: attention to position 0, over queries i >= 1 (query 0 sees only itself);
- copying: whether the head's OV circuit raises the logit of the token it attends to (Olsson et al.'s
  copying): sum(lambda) / sum(|lambda|) over the eigenvalues of the full OV circuit W_E W_V W_O W_U restricted
  to the probe's vocabulary, 1 for a circuit that only copies, -1 for one that only suppresses;
- entropy: the mean normalised row entropy (`headstab.sharpness.normalised_row_entropy`), 0 for one-hot
  rows, 1 for even attention.

Types (`headstab.head_type_thresholds`): a head has every type whose criteria all exceed their thresholds,
TYPE_CRITERIA: induction needs both prefix matching and copying, as Olsson et al. define an induction head.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headstab.activations.capture import collect_activations
from headstab.sharpness import normalised_row_entropy

__all__ = [
    "ATTENTION_SCORES",
    "CRITERIA",
    "HEAD_TYPES",
    "NO_TYPE",
    "SCORE_COLUMNS",
    "TYPE_CRITERIA",
    "ProbeSet",
    "copying_scores",
    "even_attention_scores",
    "has_type",
    "model_copying_scores",
    "pattern_scores",
    "probe_scores",
    "probe_set",
    "score_table",
    "tokenizer_probe_set",
]

HEAD_TYPES = ("previous_token", "duplicate_token", "induction", "bos")
ATTENTION_SCORES = ("previous_token", "duplicate_token", "induction", "bos")
CRITERIA = (*ATTENTION_SCORES, "copying")  # the scores that have thresholds
SCORE_COLUMNS = [*CRITERIA, "entropy"]
# Olsson et al.: an induction head matches the prefix and copies what it attends to.
TYPE_CRITERIA = {
    "previous_token": ("previous_token",),
    "duplicate_token": ("duplicate_token",),
    "induction": ("induction", "copying"),
    "bos": ("bos",),
}
NO_TYPE = "none"
SPAN = (4, 12)  # the repeated span's length, inclusive


@dataclass(frozen=True)
class ProbeSet:
    """Probe sequences and where each one's repeated span lies (positions include BOS when prepended)."""

    tokens: np.ndarray  # int64 [sequence, pos]
    first: np.ndarray  # int64 [sequence]: start of the span's first copy
    second: np.ndarray  # int64 [sequence]: start of its second copy
    span: np.ndarray  # int64 [sequence]: the span's length
    vocabulary: np.ndarray  # int64 [token]: the ids the sequences draw from (the copying score's vocabulary)

    def rows(self, part: slice) -> ProbeSet:
        """The sequences `part` of this probe set."""
        return ProbeSet(self.tokens[part], self.first[part], self.second[part], self.span[part], self.vocabulary)


def probe_set(
    vocab_size: int,
    seed: int,
    n_sequences: int,
    length: int,
    bos_token: int | None = None,
    exclude: Sequence[int] = (),
) -> ProbeSet:
    """Seeded probe sequences of `length` tokens (BOS included when `bos_token` is given).

    Each sequence draws its tokens without replacement from 0..vocab_size-1 minus `exclude` and the BOS,
    then copies a span of 4-12 of them to a later place: a random first position, a random gap after it.
    The same arguments give the same set. Raises ValueError when the vocabulary has fewer allowed tokens
    than a sequence needs or the sequence cannot hold two copies of the longest span.
    """
    body = length - (bos_token is not None)
    if body < 2 * SPAN[1] + 2 or n_sequences < 1:
        raise ValueError(
            f"config key 'head_types': a probe sequence needs at least {2 * SPAN[1] + 2 + (bos_token is not None)} "
            f"tokens and one sequence; got length {length}, n_sequences {n_sequences}"
        )
    allowed = np.setdiff1d(np.arange(vocab_size), [*exclude, *([bos_token] if bos_token is not None else [])])
    if allowed.size < body:
        raise ValueError(
            f"the probe set draws {body} distinct tokens per sequence, but the vocabulary has {allowed.size} "
            f"usable tokens (size {vocab_size}, special tokens excluded); lower config key 'head_types.length'"
        )
    rng = np.random.default_rng(seed)
    tokens = np.empty((n_sequences, body), dtype=np.int64)
    first, second, span = (np.empty(n_sequences, dtype=np.int64) for _ in range(3))
    for row in range(n_sequences):
        tokens[row] = rng.choice(allowed, size=body, replace=False)
        span[row] = rng.integers(SPAN[0], SPAN[1] + 1)
        first[row] = rng.integers(0, body - 2 * span[row] + 1)
        second[row] = first[row] + span[row] + rng.integers(0, body - 2 * span[row] - first[row] + 1)
        tokens[row, second[row] : second[row] + span[row]] = tokens[row, first[row] : first[row] + span[row]]
    if bos_token is None:
        return ProbeSet(tokens, first, second, span, allowed.astype(np.int64))
    with_bos = np.concatenate([np.full((n_sequences, 1), bos_token, dtype=np.int64), tokens], axis=1)
    return ProbeSet(with_bos, first + 1, second + 1, span, allowed.astype(np.int64))


def tokenizer_probe_set(tokenizer: Any, d_vocab: int, options: Mapping[str, Any], prepend_bos: bool) -> ProbeSet:
    """The probe set of config key head_types (`options`: seed, n_sequences, length) for a model of `d_vocab`
    rows read with `tokenizer`: the tokens it was trained on (the tokenizer's, specials left out)."""
    return probe_set(
        min(len(tokenizer), d_vocab),
        options["seed"],
        options["n_sequences"],
        options["length"],
        bos_token=tokenizer.bos_token_id if prepend_bos else None,
        exclude=tokenizer.all_special_ids,
    )


def pattern_scores(patterns: np.ndarray, probe: ProbeSet) -> dict[str, np.ndarray]:
    """Every attention score and the entropy of every head on each probe sequence.

    patterns: [sequence, head, query, key] of one layer on `probe`'s sequences (rows sum to 1, causal).
    Returns {score: float64 [sequence, head]} for ATTENTION_SCORES and entropy.
    """
    patterns = np.asarray(patterns)
    n_sequences, n_heads, length, _ = patterns.shape
    if n_sequences != probe.tokens.shape[0] or length != probe.tokens.shape[1]:
        raise ValueError(f"patterns {patterns.shape} do not match the probe set's tokens {probe.tokens.shape}")
    queries = np.arange(2, length)
    scores = {
        "previous_token": patterns[:, :, queries, queries - 1].mean(axis=-1, dtype=np.float64),
        "bos": patterns[:, :, 1:, 0].mean(axis=-1, dtype=np.float64),
    }
    # The repeat's queries: (sequence, query, earlier copy) for every token of every second copy.
    sequence = np.repeat(np.arange(n_sequences), probe.span)
    offset = np.arange(sequence.size) - np.repeat(np.cumsum(probe.span) - probe.span, probe.span)
    query = probe.second[sequence] + offset
    earlier = probe.first[sequence] + offset
    counts = probe.span.astype(np.float64)[:, None]
    for name, key in (("duplicate_token", earlier), ("induction", earlier + 1)):
        values = patterns[sequence, :, query, key].astype(np.float64)  # [repeat query, head]
        sums = np.zeros((n_sequences, n_heads))
        np.add.at(sums, sequence, values)
        scores[name] = sums / counts
    scores["entropy"] = normalised_row_entropy(patterns)
    return scores


def even_attention_scores(probe: ProbeSet) -> dict[str, float]:
    """The attention scores and entropy of a head that attends evenly to every key it sees, on `probe`
    (mean over sequences): the floor a threshold must clear before a type means more than no preference."""
    n_sequences, length = probe.tokens.shape
    even = np.tril(np.ones((length, length))) / np.arange(1, length + 1)[:, None]
    scores = pattern_scores(np.broadcast_to(even, (n_sequences, 1, length, length)), probe)
    return {name: float(values.mean()) for name, values in scores.items()}


def copying_scores(W_E: np.ndarray, W_V: np.ndarray, W_O: np.ndarray, W_U: np.ndarray) -> np.ndarray:
    """Olsson et al.'s copying score of every head: sum(lambda) / sum(|lambda|) over the eigenvalues of the full
    OV circuit W_E W_V W_O W_U [token, token].

    W_E: [token, d_model]; W_V: [layer, head, d_model, d_head]; W_O: [layer, head, d_head, d_model];
    W_U: [d_model, token] (TransformerLens's layouts, the vocabulary's rows and columns only). The nonzero
    eigenvalues of (W_E W_V)(W_O W_U) are those of (W_O W_U)(W_E W_V), a [d_head, d_head] matrix, so the score
    costs one [d_model, d_model] product and an eigendecomposition per head. Returns float64 [layer, head],
    NaN for a head whose OV circuit is zero.
    """
    W_E, W_V, W_O, W_U = (np.asarray(w, dtype=np.float64) for w in (W_E, W_V, W_O, W_U))
    if W_E.shape[0] != W_U.shape[1] or W_V.shape[:-2] != W_O.shape[:-2] or W_V.shape[-1] != W_O.shape[-2]:
        raise ValueError(
            f"W_E {W_E.shape}, W_V {W_V.shape}, W_O {W_O.shape} and W_U {W_U.shape} are not [token, d_model], "
            "[layer, head, d_model, d_head], [layer, head, d_head, d_model] and [d_model, token]"
        )
    eigenvalues = np.linalg.eigvals(W_O @ (W_U @ W_E) @ W_V)  # [layer, head, d_head]
    magnitude = np.abs(eigenvalues).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(magnitude > 0, eigenvalues.sum(axis=-1).real / magnitude, np.nan)


def model_copying_scores(model: Any, vocabulary: np.ndarray) -> np.ndarray:
    """`copying_scores` of `model`'s heads (TransformerLens's W_E, W_V, W_O, W_U, as loaded: LayerNorm scales are
    in them only where analysis.weight_processing folds them) on the token ids `vocabulary`: float64 [layer, head]."""

    def weights(name: str) -> np.ndarray:
        return getattr(model, name).detach().cpu().double().numpy()

    vocabulary = np.asarray(vocabulary)
    return copying_scores(weights("W_E")[vocabulary], weights("W_V"), weights("W_O"), weights("W_U")[:, vocabulary])


def probe_scores(model: Any, probe: ProbeSet, batch_size: int = 16) -> dict[str, np.ndarray]:
    """Every score of every head of `model` on the probe set: {score: float64 [layer, head]} for SCORE_COLUMNS,
    the attention scores the mean over sequences. The forward pass keeps hook_pattern only and stops after the
    last block (no logits); copying reads the weights."""
    names = [*ATTENTION_SCORES, "entropy"]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for start in range(0, probe.tokens.shape[0], batch_size):
        batch = probe.rows(slice(start, start + batch_size))
        patterns = collect_activations(model, batch.tokens, patterns_only=True)["hook_pattern"]
        by_layer = [pattern_scores(layer, batch) for layer in patterns]
        for name in names:
            parts[name].append(np.stack([layer[name] for layer in by_layer]))  # [layer, sequence, head]
    scores = {name: np.concatenate(values, axis=1).mean(axis=1) for name, values in parts.items()}
    return scores | {"copying": model_copying_scores(model, probe.vocabulary)}


def score_table(scores: Mapping[str, np.ndarray], refit: int | str) -> pd.DataFrame:
    """One refit's scores ({score: [layer, head]}) as rows refit, layer, head, *SCORE_COLUMNS."""
    n_layers, n_heads = np.asarray(scores["bos"]).shape
    layer, head = np.indices((n_layers, n_heads))
    columns = {name: np.asarray(scores[name], dtype=np.float64).ravel() for name in SCORE_COLUMNS}
    return pd.DataFrame({"refit": [refit] * layer.size, "layer": layer.ravel(), "head": head.ravel(), **columns})


def has_type(types: pd.Series, name: str) -> np.ndarray:
    """bool [row]: whether each `type` label (`headstab.head_type_thresholds.type_heads`) includes `name`;
    "none" for the untyped heads."""
    if name == NO_TYPE:
        return (types == NO_TYPE).to_numpy()
    return types.str.contains(rf"(?:^|\+){re.escape(name)}(?:\+|$)", regex=True).to_numpy(dtype=bool)
