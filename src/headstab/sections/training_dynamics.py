"""Stability along training: pooled layer stability of the refits at training-step snapshots
(step 0: the initialisation), with bootstrap intervals and the prompt-permutation null.

One prompt-group similarity file per step (`headstab.similarity.prompt_groups`), resampled by the
multi-bootstrap of `headstab.statistics.bootstrap` with the same draws at every step (the same
`seed`), so that differences between steps are not differences between draws.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from headstab.similarity.prompt_groups import GroupedSimilarity
from headstab.statistics.bootstrap import draw_resamples, percentile_interval, stability_replicates
from headstab.statistics.calibration import calibration_label

__all__ = ["TRAINING_DYNAMICS_COLUMNS", "stability_along_training"]

TRAINING_DYNAMICS_COLUMNS = [
    "step",
    "promptset",
    "layer",
    "stability",
    "ci_low",
    "ci_high",
    "null",
    "null_ci_low",
    "null_ci_high",
    "n_boot",
    "ci_calibration",
]


def _check_steps(grouped: Mapping[int, GroupedSimilarity]) -> None:
    """Every step's file compares the same refits over the same layers, heads and prompt groups."""
    if not grouped:
        raise ValueError("stability along training needs at least one step")
    first_step, first = next(iter(grouped.items()))
    for step, other in grouped.items():
        if list(other.seeds) != list(first.seeds) or other.observed.shape != first.observed.shape:
            raise ValueError(
                f"the prompt-group similarity of step {step} (seeds {list(other.seeds)}, shape "
                f"{other.observed.shape}) does not match step {first_step}'s (seeds {list(first.seeds)}, shape "
                f"{first.observed.shape}); rebuild the snapshots' files with the run's current seeds"
            )


def stability_along_training(
    grouped: Mapping[int, GroupedSimilarity], promptset: str, n_boot: int, seed: int, confidence: float
) -> pd.DataFrame:
    """TRAINING_DYNAMICS_COLUMNS, one row per (step, layer), steps ascending.

    grouped: {training step: the refits' prompt-group similarity at that step}, observed and null
    [group, seed_a, seed_b, layer, head_a, head_b]. stability: pooled layer stability (mean over ordered
    pairs of distinct refits and heads of the best-match similarity, Eq. 3-5); ci_low/ci_high: the
    `confidence` percentile interval of `n_boot` resamples of refits and prompt groups; null and its
    interval: the same from the prompt-permuted similarity (chance level). ci_calibration: how the study
    labels these percentile intervals at the refits' number (`headstab.statistics.calibration`).
    """
    _check_steps(grouped)
    first = next(iter(grouped.values()))
    n_seeds, n_layers = first.observed.shape[1], first.observed.shape[3]
    resamples = draw_resamples(n_boot, n_seeds, first.observed.shape[0], seed)
    frames = []
    for step in sorted(grouped):
        columns: dict[str, np.ndarray] = {}
        for which, name, prefix in (("observed", "stability", ""), ("null", "null", "null_")):
            kinds = stability_replicates(resamples, getattr(grouped[step], which), grouped[step].group_sizes)
            low, high = percentile_interval(kinds["layer"], confidence)
            columns |= {name: kinds["layer_estimate"], f"{prefix}ci_low": low, f"{prefix}ci_high": high}
        frames.append(
            pd.DataFrame(
                {
                    "step": step,
                    "promptset": promptset,
                    "layer": np.arange(n_layers),
                    **columns,
                    "n_boot": n_boot,
                    "ci_calibration": calibration_label("multibootstrap_along_training", n_seeds),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[TRAINING_DYNAMICS_COLUMNS]
