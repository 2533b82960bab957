"""What a head does: previous-token, duplicate-token, induction and BOS (sink) scores on a probe set, and types.

The scores follow Olsson et al. 2022 ("In-context learning and induction heads") and TransformerLens's
`head_detector` (`previous_token_head`, `duplicate_token_head`, `induction_head`): each is the attention a
head puts on the key that its type predicts, averaged over the queries where that key exists. The probe
set makes those keys known: seeded sequences of distinct tokens of the model's vocabulary, each with one
span of 4-12 tokens repeated later at a random offset and gap, so the only duplicate tokens are the
span's. Query q in the second copy (which starts d positions after the first) has its earlier copy at
q - d and the token after that copy at q - d + 1.

Scores per refit, layer and head (each a mean over the probe's sequences):
- previous_token: attention from i to i - 1, over queries i >= 2 (query 1's previous key is position 0,
  which bos scores);
- duplicate_token: attention from the second copy of a token to its first, over the repeat's queries;
- induction: attention from the repeat's query q to the token after the earlier copy of q's token;
- bos: attention to position 0, over queries i >= 1 (query 0 sees only itself);
- entropy: the mean normalised row entropy (`headstab.sharpness.normalised_row_entropy`), 0 for one-hot
  rows, 1 for even attention.

Types: a head has every type whose score exceeds that type's threshold: the `quantile` (0.99) of the
score over every head of the same architecture's step-0 refits (`calibrated_thresholds`), or fixed
thresholds for refits not trained here, whose initialisation we cannot rebuild.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headstab.activations.capture import collect_activations
from headstab.sharpness import normalised_row_entropy

__all__ = [
    "HEAD_TYPES",
    "HEAD_TYPE_COLUMNS",
    "NO_TYPE",
    "SCORE_COLUMNS",
    "THRESHOLD_COLUMNS",
    "ProbeSet",
    "calibrated_thresholds",
    "fixed_thresholds",
    "has_type",
    "pattern_scores",
    "probe_scores",
    "probe_set",
    "score_table",
    "type_heads",
]

HEAD_TYPES = ("previous_token", "duplicate_token", "induction", "bos")
SCORE_COLUMNS = [*HEAD_TYPES, "entropy"]
HEAD_TYPE_COLUMNS = ["refit", "layer", "head", *SCORE_COLUMNS, "type", "threshold_rule"]
THRESHOLD_COLUMNS = ["type", "threshold", "threshold_rule", "quantile", "n_heads"]
NO_TYPE = "none"
SPAN = (4, 12)  # the repeated span's length, inclusive


@dataclass(frozen=True)
class ProbeSet:
    """Probe sequences and where each one's repeated span lies (positions include BOS when prepended)."""

    tokens: np.ndarray  # int64 [sequence, pos]
    first: np.ndarray  # int64 [sequence]: start of the span's first copy
    second: np.ndarray  # int64 [sequence]: start of its second copy
    span: np.ndarray  # int64 [sequence]: the span's length

    def rows(self, part: slice) -> ProbeSet:
        """The sequences `part` of this probe set."""
        return ProbeSet(self.tokens[part], self.first[part], self.second[part], self.span[part])


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
        return ProbeSet(tokens, first, second, span)
    with_bos = np.concatenate([np.full((n_sequences, 1), bos_token, dtype=np.int64), tokens], axis=1)
    return ProbeSet(with_bos, first + 1, second + 1, span)


def pattern_scores(patterns: np.ndarray, probe: ProbeSet) -> dict[str, np.ndarray]:
    """Every score of every head on each probe sequence.

    patterns: [sequence, head, query, key] of one layer on `probe`'s sequences (rows sum to 1, causal).
    Returns {score: float64 [sequence, head]} for SCORE_COLUMNS.
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


def probe_scores(model: Any, probe: ProbeSet, batch_size: int = 16) -> dict[str, np.ndarray]:
    """Every score of every head of `model` on the probe set: {score: float64 [layer, head]}, the mean over
    sequences. The forward pass keeps hook_pattern only and stops after the last block (no logits)."""

    parts: dict[str, list[np.ndarray]] = {name: [] for name in SCORE_COLUMNS}
    for start in range(0, probe.tokens.shape[0], batch_size):
        batch = probe.rows(slice(start, start + batch_size))
        patterns = collect_activations(model, batch.tokens, patterns_only=True)["hook_pattern"]
        by_layer = [pattern_scores(layer, batch) for layer in patterns]
        for name in SCORE_COLUMNS:
            parts[name].append(np.stack([layer[name] for layer in by_layer]))  # [layer, sequence, head]
    return {name: np.concatenate(values, axis=1).mean(axis=1) for name, values in parts.items()}


def score_table(scores: Mapping[str, np.ndarray], refit: int | str) -> pd.DataFrame:
    """One refit's scores ({score: [layer, head]}) as rows refit, layer, head, *SCORE_COLUMNS."""
    n_layers, n_heads = np.asarray(scores["bos"]).shape
    layer, head = np.indices((n_layers, n_heads))
    table = pd.DataFrame({"refit": refit, "layer": layer.ravel(), "head": head.ravel()})
    for name in SCORE_COLUMNS:
        table[name] = np.asarray(scores[name], dtype=np.float64).ravel()
    return table


def calibrated_thresholds(step0_scores: pd.DataFrame, quantile: float) -> pd.DataFrame:
    """THRESHOLD_COLUMNS: each type's threshold, the `quantile` of its score over every head of the step-0
    refits (score_table rows of one architecture at initialisation); threshold_rule "step0_quantile"."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"config key 'head_types.quantile' must be in (0, 1); got {quantile}")
    if step0_scores.empty:
        raise ValueError("no step-0 scores to calibrate the head-type thresholds on")
    rows = [
        (name, float(np.quantile(step0_scores[name].to_numpy(dtype=np.float64), quantile)), "step0_quantile")
        for name in HEAD_TYPES
    ]
    table = pd.DataFrame(rows, columns=THRESHOLD_COLUMNS[:3])
    return table.assign(quantile=quantile, n_heads=len(step0_scores))


def fixed_thresholds(thresholds: Mapping[str, float]) -> pd.DataFrame:
    """THRESHOLD_COLUMNS of the fixed thresholds (config key head_types.fixed_thresholds), rule "fixed"."""
    missing = [name for name in HEAD_TYPES if name not in thresholds]
    if missing:
        raise ValueError(f"config key 'head_types.fixed_thresholds' lacks {missing}; it needs {list(HEAD_TYPES)}")
    rows = [(name, float(thresholds[name]), "fixed", np.nan, 0) for name in HEAD_TYPES]
    return pd.DataFrame(rows, columns=THRESHOLD_COLUMNS)


def type_heads(scores: pd.DataFrame, thresholds: pd.DataFrame) -> pd.DataFrame:
    """HEAD_TYPE_COLUMNS: the score rows with `type`, every type whose score exceeds its threshold joined by
    "+" in HEAD_TYPES order ("none" when no score does), and the thresholds' rule."""
    limits = thresholds.set_index("type")["threshold"]
    rules = thresholds["threshold_rule"].unique()
    if len(rules) != 1 or set(limits.index) != set(HEAD_TYPES):
        raise ValueError(f"thresholds must give every type of {list(HEAD_TYPES)} under one rule; got\n{thresholds}")
    above = np.stack([scores[name].to_numpy() > limits[name] for name in HEAD_TYPES], axis=1)
    names = np.array(HEAD_TYPES)
    labels = ["+".join(names[row]) or NO_TYPE for row in above]
    return scores.assign(type=labels, threshold_rule=rules[0])[HEAD_TYPE_COLUMNS]


def has_type(types: pd.Series, name: str) -> np.ndarray:
    """bool [row]: whether each `type` label (type_heads) includes `name`; "none" for the untyped heads."""
    if name == NO_TYPE:
        return (types == NO_TYPE).to_numpy()
    return types.str.split("+").apply(lambda parts: name in parts).to_numpy(dtype=bool)
