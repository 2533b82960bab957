"""The known answer for a run's streamed neuron statistics: the mean and variance of every neuron equal those of the
MLP activations computed outside TransformerLens, over the same held-out windows less the positions of the newline
token and of the tokenizer's BOS, EOS and padding tokens (the document separators of a held-out corpus)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FLOAT16_UNIT_ROUNDOFF = 2.0**-11  # round to nearest: relative error of one captured value
FLOAT32_ULP = 2.0**-23


def heldout_windows(shard_dir: Path, n_tokens: int, seq_len: int) -> np.ndarray:
    """The first n_tokens of the directory's token shards, in whole windows [window, seq_len] int64."""
    shards = sorted(Path(shard_dir).glob("shard_*.npy"))
    stream = np.concatenate([np.load(shard) for shard in shards])[:n_tokens].astype(np.int64)
    return stream[: len(stream) // seq_len * seq_len].reshape(-1, seq_len)


def skipped_ids(tokenizer_dir: Path) -> tuple[list[int], list[int]]:
    """The tokenizer's ids of "\\n" alone and of its BOS, EOS and padding tokens, read with transformers: the
    positions Gurnee et al. leave out."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    special = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    return tokenizer.encode("\n", add_special_tokens=False), sorted(special)


def load_pair_file(path: Path) -> dict[str, np.ndarray]:
    """Every array of a neuron statistics .npz (headstab.neurons.statistics_files)."""
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def assert_streamed_moments(statistics: dict[str, np.ndarray], side: str, activations: np.ndarray) -> list[float]:
    """The streamed mean and variance of every neuron of layer 0 and the last layer of refit `side` ("a", the
    anchor, or "b") equal those of `activations` [layer, token, d_mlp] (float64, computed outside TransformerLens
    on the streamed tokens). Returns each layer's largest |mean deviation| over its tolerance.

    Tolerance: each captured value is float16, relative error <= u = 2^-11, on top of the float32 difference of
    two implementations of the forward, at most eps = d_mlp float32 ulps of the layer's largest activation. With
    e = captured - x, |e| <= u|x| + eps per token, so |mean error| <= u mean|x| + eps and
    |variance error| = |2 cov(x, e) + var(e)| <= 2 std(x) r + r^2 with r = u rms(x) + eps."""
    n_tokens = int(statistics["n_tokens"])
    assert activations.shape[1] == n_tokens, (activations.shape, n_tokens)
    ratios = []
    for layer in (0, len(activations) - 1):
        x = activations[layer]  # [token, d_mlp]
        u, eps = FLOAT16_UNIT_ROUNDOFF, FLOAT32_ULP * x.shape[1] * np.abs(x).max()
        r = u * np.sqrt((x**2).mean(0)) + eps
        mean_tolerance = u * np.abs(x).mean(0) + eps
        mean = statistics[f"mean_{side}"][layer]
        variance = np.diagonal(statistics[f"comoment_{side}"][layer]) / n_tokens
        np.testing.assert_array_less(np.abs(mean - x.mean(0)), mean_tolerance)
        np.testing.assert_array_less(np.abs(variance - x.var(0)), 2 * x.std(0) * r + r**2)
        ratios.append(float(np.max(np.abs(mean - x.mean(0)) / mean_tolerance)))
    return ratios
