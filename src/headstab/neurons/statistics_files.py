"""Save and load streamed neuron statistics (`headstab.neurons.streamed.PairStatistics`) as .npz files.

A file holds the five float64 tensors under their field names, the refit labels, the scope, the token
count and a format version; loading checks the count (positive, and equal to the token budget when one is
given) and the shapes against each other, so a truncated or foreign file stops with its name and the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from headstab.fileio import atomic_path
from headstab.neurons.streamed import NEURON_SCOPES, PairStatistics

__all__ = ["NEURON_STATISTICS_FORMAT", "load_pair_statistics", "save_pair_statistics"]

NEURON_STATISTICS_FORMAT = "headstab-neuron-statistics-1"
_TENSORS = ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")


def save_pair_statistics(statistics: PairStatistics, path: str | Path) -> None:
    """Write `statistics` to `path` (.npz, uncompressed) atomically."""
    arrays = {name: getattr(statistics, name).cpu().numpy() for name in _TENSORS}
    labels = {"anchor": statistics.anchor, "other": statistics.other, "scope": statistics.scope}
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez(
            handle,
            format=np.array(NEURON_STATISTICS_FORMAT),
            n_tokens=np.array(statistics.n_tokens, dtype=np.int64),
            **{name: np.array(value) for name, value in labels.items()},
            **arrays,
        )


def load_pair_statistics(
    path: str | Path, expected_tokens: int | None = None, device: str | torch.device = "cpu"
) -> PairStatistics:
    """The statistics saved at `path`; expected_tokens: the token budget the stream should have read."""
    path = Path(path)
    try:
        statistics = _read(path, device)
    except ValueError as error:
        if "allow_pickle" not in str(error):
            raise
        raise ValueError(
            f"{path}: holds pickled objects, which are never loaded (unpickling can run code); it is not a neuron "
            "statistics file of this version: delete it and let the workflow stream it again"
        ) from error
    _check_counts(path, statistics, expected_tokens)
    _check_shapes(path, statistics)
    return statistics


def _read(path: Path, device: str | torch.device) -> PairStatistics:
    with np.load(path, allow_pickle=False) as data:
        found = str(data["format"]) if "format" in data.files else None
        if found != NEURON_STATISTICS_FORMAT:
            raise ValueError(
                f"{path}: format {found!r}, not {NEURON_STATISTICS_FORMAT!r}; it is not a neuron statistics file "
                "of this version: delete it and let the workflow stream it again"
            )
        n_tokens, scope = int(data["n_tokens"]), str(data["scope"])
        anchor, other = str(data["anchor"]), str(data["other"])
        tensors = {name: torch.from_numpy(data[name]).to(device) for name in _TENSORS}
    return PairStatistics(anchor, other, scope, n_tokens, **tensors)


def _check_counts(path: Path, statistics: PairStatistics, expected_tokens: int | None) -> None:
    where = f"{path} (refit {statistics.anchor!r} against {statistics.other!r})"
    if statistics.n_tokens < 2:
        raise ValueError(f"{where}: {statistics.n_tokens} token(s) streamed; delete it and stream the token budget")
    if expected_tokens is not None and statistics.n_tokens != expected_tokens:
        raise ValueError(
            f"{where}: {statistics.n_tokens} tokens streamed, but the token budget is {expected_tokens}; a stream "
            "stopped early or the budget changed: delete the file and stream it again"
        )


def _check_shapes(path: Path, statistics: PairStatistics) -> None:
    if statistics.scope not in NEURON_SCOPES:
        raise ValueError(f"{path}: scope {statistics.scope!r} is not one of {', '.join(NEURON_SCOPES)}")
    n_layers, d_mlp = statistics.mean_a.shape
    flat = n_layers * d_mlp
    square = (n_layers, d_mlp, d_mlp)
    expected = {
        "mean_a": (n_layers, d_mlp),
        "mean_b": (n_layers, d_mlp),
        "comoment_a": square,
        "comoment_b": square,
        "cross": (flat, flat) if statistics.scope == "cross_layer" else square,
    }
    for name, shape in expected.items():
        found = tuple(getattr(statistics, name).shape)
        if found != shape:
            raise ValueError(
                f"{path}: {name} has shape {found}, not {shape} (layer {n_layers}, d_mlp {d_mlp}, scope "
                f"{statistics.scope}); the file is damaged: delete it and stream it again"
            )
