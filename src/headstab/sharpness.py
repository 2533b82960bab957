"""How sharp an attention head is: the entropy of its causal pattern rows.

A row's entropy is normalised by the log of its number of keys (query i sees i + 1 keys), so a head
that spreads evenly over every visible key scores 1 and a head that puts all its attention on one key
scores 0, whatever the row's length. Query 0 sees one key and has no entropy to normalise; it is left out.
The cosine of two patterns falls as they sharpen, whatever the heads compute (docs/statistics.md), so
stability is read beside this number.

The content variant of stability compares what is left of a pattern once its position-only template is
taken away. A head's template at query position i is its mean attention row i over every prompt that
reaches position i: a causal row depends on tokens 0..i only, so under "attends by position alone" every
prompt long enough sees the same row, whatever its length. A prompt's template is the first T rows of it.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "content_remainder",
    "lone_template_entries",
    "normalised_row_entropy",
    "packed_row_entropy",
    "position_template",
]


def normalised_row_entropy(pattern: np.ndarray, length: int | None = None) -> np.ndarray:
    """Mean normalised entropy of the rows of causal attention patterns.

    pattern: [..., query_pos, key_pos], each row a distribution over keys 0..query (zero above the
    diagonal); only the leading `length` x `length` block (default: all) is read, padding never enters.
    Returns float64 [...]: the mean over queries 1..length-1 of -sum_k p log p / log(query + 1);
    NaN for patterns of fewer than two tokens.
    """
    pattern = np.asarray(pattern, dtype=np.float64)
    length = pattern.shape[-1] if length is None else int(length)
    if length < 2:
        return np.full(pattern.shape[:-2], np.nan)
    rows = pattern[..., 1:length, :length]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(rows > 0, rows * np.log(rows), 0.0)
    entropy = -terms.sum(axis=-1)  # [..., query]
    return (entropy / np.log(np.arange(2, length + 1))).mean(axis=-1)


def _row_starts(lengths: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each query row of each prompt starts in a packed block, and its query index: int64 [row] each."""
    lengths = np.asarray(lengths, dtype=np.int64)
    query = np.concatenate([np.arange(length) for length in lengths]) if lengths.size else np.zeros(0, np.int64)
    prompt_start = np.repeat(np.asarray(offsets[:-1], dtype=np.int64), lengths)
    return prompt_start + query * (query + 1) // 2, query


def packed_row_entropy(
    block: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, rows_per_chunk: int = 64
) -> np.ndarray:
    """`normalised_row_entropy` of every prompt's pattern, from packed lower triangles.

    block: [row, entry] packed causal patterns (`headstab.activations.packing`; prompt p's entries at
    offsets[p]:offsets[p + 1]). Returns float64 [row, prompt]; NaN for prompts of fewer than two tokens.
    Works through rows_per_chunk rows at a time, so its temporaries stay small beside the block.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    starts, query = _row_starts(lengths, offsets)
    out = np.full((len(block), lengths.size), np.nan)
    if starts.size == 0:
        return out
    prompt_starts = np.r_[0, np.cumsum(lengths)[:-1]]
    keys = np.log(np.maximum(query, 1) + 1.0)  # query 0 sees one key: its entropy is 0, divided by anything
    for first in range(0, len(block), rows_per_chunk):
        values = np.asarray(block[first : first + rows_per_chunk], dtype=np.float32)
        positive = values > 0
        terms = np.where(positive, values * np.log(np.where(positive, values, 1.0)), 0.0)
        entropy = -np.add.reduceat(terms, starts, axis=1, dtype=np.float64) / keys
        entropy[:, query == 0] = 0.0
        per_prompt = np.add.reduceat(entropy, prompt_starts, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[first : first + rows_per_chunk] = np.where(lengths >= 2, per_prompt / (lengths - 1), np.nan)
    return out


def position_template(block: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's position-only template: at every lower-triangle entry of the longest prompt, the mean over
    the prompts that reach it.

    block: [row, entry] packed causal patterns. Returns (float64 [row, n_lower_entries(max length)] template,
    int64 [same entries] number of prompts averaged). A prompt of length T packs the first T rows of the
    longest prompt's triangle, so its template is the template's leading n_lower_entries(T) entries.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    widths = lengths * (lengths + 1) // 2
    longest = int(widths.max(initial=0))
    total = np.zeros((len(block), longest))
    for prompt, width in enumerate(widths):
        total[:, :width] += block[:, offsets[prompt] : offsets[prompt] + width]
    support = (np.arange(longest)[None, :] < widths[:, None]).sum(axis=0)
    return total / np.maximum(support, 1), support


def content_remainder(block: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Packed patterns minus each row's position-only template (`position_template`): float32 [row, entry],
    the same layout; an entry reached by one prompt only is exactly zero."""
    template, _ = position_template(block, lengths, offsets)
    template = template.astype(np.float32)
    remainder = np.array(block, dtype=np.float32, order="C")
    for prompt, length in enumerate(np.asarray(lengths, dtype=np.int64)):
        width = int(length * (length + 1) // 2)
        remainder[:, offsets[prompt] : offsets[prompt] + width] -= template[:, :width]
    return remainder


def lone_template_entries(lengths: np.ndarray) -> int:
    """How many packed entries of a prompt set have a template of one prompt (a zero content remainder):
    the rows of the longest prompt beyond every other prompt's length."""
    lengths = np.sort(np.asarray(lengths, dtype=np.int64))
    if lengths.size == 0:
        return 0
    second = lengths[-2] if lengths.size > 1 else 0
    return int(lengths[-1] * (lengths[-1] + 1) // 2 - second * (second + 1) // 2)
