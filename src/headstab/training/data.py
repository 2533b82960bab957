"""A refit's data: non-overlapping token windows over the corpus shards, their seeded order, the step budget.

The shards (1-D uint16/uint32 streams, documents joined by EOS) are cut into windows of `seq_len`
tokens; the refit's seed shuffles the window order (one permutation of all windows across shards per
epoch), as the paper's code shuffles its dataset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from headstab.data.shards import load_shards
from headstab.plan.spec import ArchitectureSpec
from headstab.training.errors import TrainingError


@dataclass(frozen=True)
class TokenWindows:
    """Non-overlapping `seq_len`-token windows over memory-mapped shards (a shard's tail shorter than seq_len is dropped)."""

    shards: tuple[np.ndarray, ...]  # each [token]
    first_window: np.ndarray  # [shard + 1] global index of each shard's first window (cumulative counts)
    seq_len: int

    @classmethod
    def open(cls, shard_paths: Sequence[str | Path], seq_len: int) -> TokenWindows:
        shards = tuple(load_shards(shard_paths))
        counts = [len(s) // seq_len for s in shards]
        return cls(shards, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), seq_len)

    @property
    def n_windows(self) -> int:
        return int(self.first_window[-1])

    def max_token_id(self) -> int:
        return max((int(s.max()) for s in self.shards if len(s)), default=-1)

    def batch(self, window_ids: np.ndarray) -> torch.Tensor:
        """Tokens of the given global windows, [batch, seq_len] int64."""
        shard_of = np.searchsorted(self.first_window, window_ids, side="right") - 1
        starts = (window_ids - self.first_window[shard_of]) * self.seq_len
        rows = [self.shards[s][o : o + self.seq_len] for s, o in zip(shard_of, starts)]
        return torch.from_numpy(np.stack(rows).astype(np.int64))


def window_order(n_windows: int, seed: int, n_needed: int) -> np.ndarray:
    """The first `n_needed` global window ids of the refit's data order, [n_needed].

    Epoch e is the e-th permutation of all windows drawn from np.random.default_rng(seed), so the
    order of a longer run extends that of a shorter one.
    """
    rng = np.random.default_rng(seed)
    n_epochs = max(1, math.ceil(n_needed / n_windows)) if n_windows else 0
    order = [rng.permutation(n_windows) for _ in range(n_epochs)]
    return np.concatenate(order)[:n_needed] if order else np.zeros(0, dtype=np.int64)


def training_steps(spec: ArchitectureSpec, n_windows: int, corpus_label: str) -> int:
    """Optimiser steps of a refit: `n_tokens // (batch_size * seq_len)`, or `epochs` passes when n_tokens is null."""
    available = n_windows * spec.epochs
    if spec.n_tokens is None:
        steps = available // spec.batch_size
    else:
        steps = spec.n_tokens // spec.tokens_per_step
        if steps * spec.batch_size > available:
            raise TrainingError(
                f"corpus {corpus_label} holds {n_windows:,} windows of seq_len {spec.seq_len} "
                f"({n_windows * spec.seq_len:,} tokens usable, x{spec.epochs} epochs = {available * spec.seq_len:,}), "
                f"fewer than the {spec.n_tokens:,} tokens (n_tokens) architecture '{spec.name}' requests; lower "
                f"`architectures.{spec.name}.n_tokens` (or architecture_defaults.n_tokens) or build a larger corpus "
                f"(`corpora.{spec.corpus}.n_tokens`, or n_documents for a synthetic corpus)"
            )
    if steps < 1:
        raise TrainingError(
            f"architecture '{spec.name}' gets 0 training steps from corpus {corpus_label} ({n_windows} windows of "
            f"{spec.seq_len} tokens, batch_size {spec.batch_size}, n_tokens {spec.n_tokens}); raise "
            f"`architectures.{spec.name}.n_tokens` or build a larger corpus"
        )
    return steps


def check_training_vocabulary(
    spec: ArchitectureSpec, tokenizer_size: int | None, max_token_id: int, tokenizer_label: str, corpus_label: str
) -> None:
    """The model's embedding must cover the tokenizer and every token id in the shards."""
    if tokenizer_size is not None and tokenizer_size > spec.d_vocab:
        raise TrainingError(
            f"tokenizer {tokenizer_label} has {tokenizer_size:,} tokens, more than d_vocab {spec.d_vocab:,} of "
            f"architecture '{spec.name}'; raise `architectures.{spec.name}.d_vocab` (or architecture_defaults.d_vocab) "
            f"to at least {tokenizer_size}, or use a smaller tokenizer"
        )
    if max_token_id >= spec.d_vocab:
        raise TrainingError(
            f"corpus {corpus_label} holds token id {max_token_id:,}, outside d_vocab {spec.d_vocab:,} of architecture "
            f"'{spec.name}'; were the shards built with another tokenizer? Rebuild them (delete the corpus directory "
            f"and rerun) or raise `architectures.{spec.name}.d_vocab`"
        )
