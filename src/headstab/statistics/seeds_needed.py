"""How many refits a seed study needs: the interval width of layer stability and of the stability gap
against the number of refits used, from subsets of an architecture's refits.

For each size n (3 .. N, a geometric grid), `n_subsets` random subsets of n refits are drawn and the
multi-bootstrap run on each (refits and prompt groups); the width is the mean over subsets of the
percentile interval's width. Two refits are left out: a pooled resample must draw both (a pair needs
two distinct refits), so their bootstrap cannot vary the refits and would understate the width.
Widths of a mean over pairs of n refits shrink like 1/sqrt(n); the refits needed are the smallest n
from which every measured width is at most the tolerance, or, when the N refits at hand do not reach
it, n* = N (w_N / tol)^2 extrapolated from the full set's width w_N.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.statistics.bootstrap import draw_resamples, percentile_interval, stability_replicates
from headstab.statistics.calibration import calibration_label
from headstab.statistics.hypothesis import gap_replicates

__all__ = ["CURVE_COLUMNS", "NEEDED_COLUMNS", "seeds_needed", "seeds_needed_curve", "subset_sizes"]

CURVE_COLUMNS = ["statistic", "layer", "n_refits", "ci_width", "ci_width_sd", "n_subsets", "n_boot", "ci_calibration"]
# The interval whose width is measured: the pooled multi-bootstrap of layer stability, and of ΔS from its replicates.
WIDTH_METHODS = {"layer_stability": "multibootstrap_pooled", "delta_s": "multibootstrap_gap"}
NEEDED_COLUMNS = [
    "statistic",
    "layer",
    "tolerance",
    "n_refits_needed",
    "extrapolated",
    "n_refits_available",
    "ci_width_at_available",
    "ci_calibration",
]


def subset_sizes(n_seeds: int, max_sizes: int = 10) -> list[int]:
    """At most max_sizes subset sizes from 3 to n_seeds, spaced geometrically, both ends included."""
    if n_seeds < 3:
        raise ValueError(f"the seeds-needed curve needs at least 3 refits (2 cannot be resampled); got {n_seeds}")
    return sorted({int(round(v)) for v in np.geomspace(3, n_seeds, num=min(max_sizes, n_seeds - 2))})


def seeds_needed_curve(
    grouped: np.ndarray,
    group_sizes: np.ndarray,
    *,
    n_boot: int,
    n_subsets: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """CURVE_COLUMNS: per statistic ("layer_stability" per layer, "delta_s" with layer -1) and subset size;
    ci_calibration: how the study labels the interval whose width this is, at the subset's refits.

    grouped: [group, seed_a, seed_b, layer, head_a, head_b] (same-layer, per prompt group).
    """
    n_seeds = grouped.shape[1]
    rng = np.random.default_rng(seed)
    rows = []
    for size in subset_sizes(n_seeds):
        subsets = (
            [np.arange(n_seeds)]
            if size == n_seeds
            else [np.sort(rng.choice(n_seeds, size, replace=False)) for _ in range(n_subsets)]
        )
        widths = []
        for subset in subsets:
            part = grouped[:, subset][:, :, subset]
            resamples = draw_resamples(n_boot, size, grouped.shape[0], int(rng.integers(2**31)))
            layer = stability_replicates(resamples, part, group_sizes)["layer"]
            low, high = percentile_interval(layer, confidence)
            gap_low, gap_high = percentile_interval(gap_replicates(layer)["delta_s"], confidence)
            widths.append(np.r_[high - low, gap_high - gap_low])
        widths = np.array(widths)
        n_layers = grouped.shape[3]
        for index, layer_index in enumerate([*range(n_layers), -1]):
            statistic = "layer_stability" if layer_index >= 0 else "delta_s"
            rows.append(
                (
                    statistic,
                    layer_index,
                    size,
                    widths[:, index].mean(),
                    widths[:, index].std(ddof=1) if len(widths) > 1 else 0.0,
                    len(subsets),
                    n_boot,
                    calibration_label(WIDTH_METHODS[statistic], size),
                )
            )
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def seeds_needed(curve: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """NEEDED_COLUMNS: per statistic and layer, the smallest subset size from which every measured mean
    width is <= tolerance; when the full set's width w_N is above it, n* = N (w_N / tolerance)^2
    (extrapolated True); ci_calibration: the label of the interval whose width ci_width_at_available is."""
    if tolerance <= 0:
        raise ValueError(f"config key 'statistics.seeds_needed_tolerance' must be > 0; got {tolerance}")
    rows = []
    for (statistic, layer), part in curve.groupby(["statistic", "layer"], sort=False):
        part = part.sort_values("n_refits")
        available = int(part["n_refits"].max())
        width = float(part["ci_width"].iloc[-1])
        above = part[part["ci_width"] > tolerance]
        if width <= tolerance:
            later = part[part["n_refits"] > above["n_refits"].max()] if len(above) else part
            needed, extrapolated = int(later["n_refits"].iloc[0]), False
        else:
            needed, extrapolated = int(np.ceil(available * (width / tolerance) ** 2)), True
        label = calibration_label(WIDTH_METHODS[statistic], available)
        rows.append((statistic, layer, tolerance, needed, extrapolated, available, width, label))
    return pd.DataFrame(rows, columns=NEEDED_COLUMNS)
