"""Which head types did training put there? Trained refits against the same refits at step 0, per layer and type.

A type is trained in when at least `min_share` of the trained refits have a head of it in the layer (weak
universality) and the step-0 refits clearly do not: the upper end of the step-0 interval lies below the
lower end of the trained one. Both sides are typed with the same thresholds (the step-0 quantile of
`headstab.head_types.calibrated_thresholds`), and intervals resample refits as `headstab.sections.head_types`
does. Each trained-in row carries the type's stability above the prompt-permutation null (the universality
table's `above_null`) with its interval; an architecture with no trained-in type gets one sentence saying
that its heads are positional at this scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from headstab.head_types import HEAD_TYPES, has_type
from headstab.plan.spec import ArchitectureSpec
from headstab.statistics.bootstrap import draw_resamples, percentile_interval

__all__ = ["TRAINED_IN_COLUMNS", "trained_in_sentences", "trained_in_table", "training_label", "weak_universality"]

TRAINED_IN_COLUMNS = ["architecture", "layer", "type", "trained", "trained_ci_low", "trained_ci_high", "n_trained"]
TRAINED_IN_COLUMNS += ["step0", "step0_ci_low", "step0_ci_high", "n_step0"]
TRAINED_IN_COLUMNS += ["above_null", "above_null_ci_low", "above_null_ci_high", "trained_in"]


def training_label(spec: ArchitectureSpec) -> str:
    """How an architecture was trained, in words: steps (when its token budget fixes them), optimizer, lr, decay."""
    length = (
        f"{spec.n_tokens // spec.tokens_per_step:,} steps of {spec.batch_size} x {spec.seq_len} tokens"
        if spec.n_tokens is not None
        else f"{spec.epochs} epoch(s) in batches of {spec.batch_size} x {spec.seq_len} tokens"
    )
    decay = f" weight decay {spec.weight_decay:g}" if spec.weight_decay else ""
    return f"{length}, {spec.optimizer} lr {spec.lr:g}{decay}"


def weak_universality(
    types: pd.DataFrame, name: str, layer: int, n_boot: int, seed: int, confidence: float
) -> tuple[float, float, float, int]:
    """(share, ci_low, ci_high, n refits) of refits with at least one head of type `name` in `layer`."""
    rows = types[types["layer"] == layer]
    present = rows.assign(hit=has_type(rows["type"], name)).groupby("refit", sort=True)["hit"].any()
    values = present.to_numpy(dtype=np.float64)
    if len(values) < 2:
        return float(values.mean()) if len(values) else np.nan, np.nan, np.nan, len(values)
    counts = draw_resamples(n_boot, len(values), 1, seed).refit_counts.astype(np.float64)
    low, high = percentile_interval((counts @ values) / counts.sum(axis=1), confidence)
    return float(values.mean()), float(low), float(high), len(values)


def trained_in_table(
    architecture: str,
    trained: pd.DataFrame,
    step0: pd.DataFrame,
    universality: pd.DataFrame,
    *,
    min_share: float,
    n_boot: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """TRAINED_IN_COLUMNS per layer and type of HEAD_TYPES: trained and step-0 weak universality with intervals.

    trained, step0: head_types.csv rows (type_heads) of the trained and the step-0 refits, typed with the same
    thresholds; universality: the architecture's head_type_universality.csv (its `above_null` rows).
    """
    above = universality[universality["statistic"] == "above_null"].set_index(["layer", "type"])
    rows = []
    for layer in sorted(trained["layer"].unique()):
        for name in HEAD_TYPES:
            share, low, high, n = weak_universality(trained, name, layer, n_boot, seed, confidence)
            share0, low0, high0, n0 = weak_universality(step0, name, layer, n_boot, seed, confidence)
            null = above.loc[(layer, name)] if (layer, name) in above.index else None
            gain = [np.nan] * 3 if null is None else [null["estimate"], null["ci_low"], null["ci_high"]]
            trained_in = bool(share >= min_share and np.isfinite(high0) and np.isfinite(low) and high0 < low)
            rows.append(
                (architecture, int(layer), name, share, low, high, n, share0, low0, high0, n0, *gain, trained_in)
            )
    return pd.DataFrame(rows, columns=TRAINED_IN_COLUMNS)


def _interval(value: float, low: float, high: float, digits: int = 2) -> str:
    if not np.isfinite(low):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def trained_in_sentences(table: pd.DataFrame, architectures: Sequence[str], facts: Mapping[str, str]) -> list[str]:
    """One sentence per architecture: its trained-in types (refits, step-0 refits, above the null), or that its
    heads are positional at this scale. `facts` gives each architecture's training in words."""
    sentences = []
    for arch in architectures:
        rows = table[(table["architecture"] == arch) & table["trained_in"]]
        training = f" ({facts[arch]})" if facts.get(arch) else ""
        if rows.empty:
            sentences.append(
                f"{arch}{training}: no head type that training put there (none is in at least the required share "
                "of trained refits and clearly fewer step-0 refits); its heads are positional at this scale, "
                "which is why its stability sits at the prompt-permutation null."
            )
            continue
        parts = []
        for row in rows.itertuples():
            trained_refits = round(row.trained * row.n_trained)
            step0_refits = round(row.step0 * row.n_step0)
            parts.append(
                f"{row.type.replace('_', '-')} heads in layer {row.layer}: {trained_refits} of {row.n_trained} trained "
                f"refits, {_interval(row.trained, row.trained_ci_low, row.trained_ci_high)}, against {step0_refits} "
                f"of {row.n_step0} at step 0, {_interval(row.step0, row.step0_ci_low, row.step0_ci_high)}; their "
                f"stability above the null {_interval(row.above_null, row.above_null_ci_low, row.above_null_ci_high, 3)}"
            )
        sentences.append(f"{arch}{training}: training put there " + "; ".join(parts) + ".")
    return sentences
