"""MLP neuron activations of a model, batch by batch, for the streamed statistics: `blocks.{layer}.mlp.hook_post`
(the activation after the nonlinearity, Gurnee et al.'s neurons) of every layer, float16 [token, layer, d_mlp].

Models are TransformerLens models (the TransformerBridge of `headstab.refits.models`, or a HookedTransformer):
one forward pass per batch with a hook on each MLP activation, stopped by the last one (TransformerLens 4's bridge
ignores `stop_at_layer`, and the unembedding of GPT-2 small alone is [batch, pos, 50257] floats a batch).
Batches are token ids [batch, pos]; right-padded batches come with their lengths, and padded positions are
dropped, so a token counts once whatever the batching. `skip_tokens` drops the positions holding given token ids besides: Gurnee
et al. leave out the padding token (BOS and EOS too in GPT-2 and Pythia) and the newline token, whose activations
are outliers shared by every model (`special_token_ids`, `newline_token_ids`).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from headstab.neurons.streamed import PairStatistics

__all__ = [
    "MLP_POST_HOOK",
    "mlp_post_chunks",
    "mlp_post_hook_names",
    "neuron_pair_passes",
    "newline_token_ids",
    "special_token_ids",
    "stream_all_pairs",
    "stream_pair_statistics",
]

MLP_POST_HOOK = "mlp.hook_post"

Batch = np.ndarray | tuple[np.ndarray, np.ndarray]  # tokens [batch, pos], or (tokens, lengths [batch])


def mlp_post_hook_names(model: Any) -> list[str]:
    """`blocks.{layer}.mlp.hook_post` of every layer of `model`, failing on a model without them."""
    names = [f"blocks.{layer}.{MLP_POST_HOOK}" for layer in range(int(model.cfg.n_layers))]
    missing = [name for name in names if name not in model.hook_dict]
    if missing:
        raise ValueError(
            f"the model has no hook {missing[0]} (attention-only, or not a TransformerLens model); neuron "
            "statistics need the MLP activations: give an architecture with MLPs"
        )
    return names


def _split(batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(batch, tuple):
        tokens, lengths = batch
        return np.asarray(tokens), np.asarray(lengths)
    return np.asarray(batch), None


class _StopForward(Exception):
    """Raised by the last MLP hook: nothing after it is needed."""


def _mlp_post(model: Any, ids: Any, names: list[str]) -> dict[str, Any]:
    """{hook name: [batch, pos, d_mlp]} of one forward pass stopped at the last of `names`; no hook is left on the
    model (run_with_hooks removes its hooks however the pass ends)."""
    store: dict[str, Any] = {}

    def keeper(name: str, last: bool):
        def keep(tensor: Any, hook: Any) -> Any:
            store[name] = tensor.detach()
            if last:
                raise _StopForward
            return tensor

        return keep

    hooks = [(name, keeper(name, index == len(names) - 1)) for index, name in enumerate(names)]
    try:
        model.run_with_hooks(ids, fwd_hooks=hooks)
    except _StopForward:
        pass
    missing = [name for name in names if name not in store]
    if missing:
        raise RuntimeError(f"the forward pass never reached hook {missing[0]}; its activations cannot be read")
    return store


def mlp_post_chunks(
    model: Any, batches: Iterable[Batch], on_device: bool = False, skip_tokens: Collection[int] = ()
) -> Iterator[Any]:
    """Yield each batch's `blocks.{layer}.mlp.hook_post` activations, float16 [token, layer, d_mlp]: the real
    tokens of the batch in row-major order (prompt by prompt, position by position), less the positions holding
    a token of `skip_tokens`. A numpy array, or with `on_device` a torch tensor left on the model's device (no
    round trip through the host on a GPU)."""
    import torch

    names = mlp_post_hook_names(model)
    device = next(model.parameters()).device
    for batch in batches:
        tokens, lengths = _split(batch)
        ids = torch.as_tensor(tokens, dtype=torch.long, device=device)
        with torch.inference_mode():
            cache = _mlp_post(model, ids, names)
        stacked = torch.stack([cache[name] for name in names], dim=2)  # [batch, pos, layer, d_mlp]
        keep = ~torch.isin(ids, torch.as_tensor(list(skip_tokens), dtype=torch.long, device=device))
        if lengths is not None:
            keep &= (
                torch.arange(ids.shape[1], device=device)[None, :] < torch.as_tensor(lengths, device=device)[:, None]
            )
        chunk = stacked[keep].to(torch.float16)
        yield chunk if on_device else chunk.cpu().numpy()


def stream_pair_statistics(
    anchor_model: Any,
    other_model: Any,
    batches: Iterable[Batch],
    scope: str,
    names: tuple[str, str],
    device: str | Any = "cpu",
    skip_tokens: Collection[int] = (),
) -> PairStatistics:
    """Statistics of both models' neurons over the same `batches` (each batch read by both, then dropped).

    names: the (anchor, other) refit labels the statistics and their messages carry; device: where the
    float64 accumulators live; skip_tokens: as `mlp_post_chunks`.
    """
    n_layers, d_mlp = int(anchor_model.cfg.n_layers), int(anchor_model.cfg.d_mlp)
    statistics = PairStatistics.empty(*names, n_layers, d_mlp, scope, device)
    for batch in batches:
        (a,) = mlp_post_chunks(anchor_model, [batch], on_device=True, skip_tokens=skip_tokens)
        (b,) = mlp_post_chunks(other_model, [batch], on_device=True, skip_tokens=skip_tokens)
        statistics.update(a, b)
    return statistics


def stream_all_pairs(
    models: Mapping[str, Any],
    batches: Iterable[Batch],
    scope: str,
    device: str | Any = "cpu",
    skip_tokens: Collection[int] = (),
    pairs: Sequence[tuple[str, str]] | None = None,
) -> dict[tuple[str, str], PairStatistics]:
    """Statistics of every unordered pair of `models` ({refit label: model}, one architecture) over the same
    batches, each model run once per batch: {(a, b): statistics with a as anchor} for a before b in the
    mapping's order. pairs: only these (anchor, other) pairs (`neuron_pair_passes` bounds them by memory),
    only their models run. Memory: one accumulator per pair (`headstab.neurons.streamed.accumulator_bytes`)."""
    labels = list(models)
    wanted = list(itertools.combinations(labels, 2)) if pairs is None else [tuple(pair) for pair in pairs]
    unknown = sorted({label for pair in wanted for label in pair} - set(labels))
    if unknown:
        raise ValueError(f"neuron pairs name refits {unknown} that are not among the models {labels}")
    first = models[labels[0]]
    n_layers, d_mlp = int(first.cfg.n_layers), int(first.cfg.d_mlp)
    statistics_of = {pair: PairStatistics.empty(*pair, n_layers, d_mlp, scope, device) for pair in wanted}
    running = [label for label in labels if any(label in pair for pair in wanted)]
    for batch in batches:
        chunks = {
            label: next(mlp_post_chunks(models[label], [batch], on_device=True, skip_tokens=skip_tokens))
            for label in running
        }
        for (a, b), statistics in statistics_of.items():
            statistics.update(chunks[a], chunks[b])
    return statistics_of


def neuron_pair_passes(labels: Sequence[str], pair_bytes: int, budget_bytes: int | None) -> list[list[tuple[str, str]]]:
    """Every unordered pair of `labels`, in passes over the tokens whose accumulators (pair_bytes each) fit
    budget_bytes (None: one pass); at least one pair a pass."""
    pairs = list(itertools.combinations(labels, 2))
    per_pass = len(pairs) if budget_bytes is None else max(1, budget_bytes // pair_bytes)
    return [pairs[start : start + per_pass] for start in range(0, len(pairs), per_pass)]


def newline_token_ids(tokenizer: Any) -> list[int]:
    """The id of the newline token ("\\n" alone), which Gurnee et al. leave out; none when the tokenizer
    spells "\\n" with several tokens."""
    ids = tokenizer.encode("\n", add_special_tokens=False)
    return list(ids) if len(ids) == 1 else []


def special_token_ids(tokenizer: Any) -> list[int]:
    """The ids of the tokenizer's BOS, EOS and padding tokens (those it has), sorted: Gurnee et al. leave out the
    padding id, which is BOS and EOS in GPT-2 and Pythia; in a held-out corpus they separate the documents."""
    ids = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    return sorted(int(token) for token in ids if token is not None)
