"""Initialisation seed vs data-order seed: what in a seed makes heads differ (docs/beyond_the_paper.md).

The refits of a seed grid are named "{init}-{data}" (`headstab.plan.seed_design`). A pair of distinct refits
shares the init seed (it differs in data order alone), shares the data seed (it differs in initialisation
alone) or shares neither. Per layer, pair stability (the mean over the anchor's heads of the best-match
similarity in the pair refit, Eq. 3-4, same-layer scope) is averaged over the ordered pairs of each kind.

Decomposition. Head instability u = 1 - s (for unit pattern vectors, 1 - cos is half their squared
distance). Read as a crossed random-effects design x_{id} = a_i + b_d + c_{id}, pairs that share the init
(differ in data order alone) have u_SI = 2(σ²_data + σ²_int), pairs that share the data order (differ in init
alone) u_SD = 2(σ²_init + σ²_int), pairs that share neither u_N = 2(σ²_init + σ²_data + σ²_int). So

    init_fraction = (u_N - u_SI) / u_N = σ²_init / total,
    data_fraction = (u_N - u_SD) / u_N = σ²_data / total,
    interaction_fraction = 1 - init_fraction - data_fraction   (σ²_int: the refit's own part, c_{id}).

The floor. c_{id} holds whatever training does to a refit beyond its two seeds, including how far it carries
a one-bit difference (a nonassociative sum on another device, a kernel's order). A grid cell's one-ulp twin
"{init}-{data}-ulp" shares both seeds and differs in the last bit of its initial weights alone, so the pair
(cell, twin) "shares_both" and u_B = 2σ²_ulp measures that part: floor_fraction = u_B / u_N, and
seed_interaction_fraction = interaction_fraction - floor_fraction is the interaction that a one-bit change does
not already produce. A twin enters no other pair (its cell already stands for those seeds).

Intervals resample refits (`headstab.statistics.refit_weights`): a pair (a, b) weighs k_a k_b, a twin counts
as its cell (the pair (cell, twin) weighs k_cell²), and the means and the fractions are recomputed from the
same draw.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.plan.seed_design import refit_seeds, ulp_perturbed, unperturbed
from headstab.statistics.bootstrap import draw_resamples, percentile_interval
from headstab.statistics.calibration import calibration_label
from headstab.statistics.refit_weights import row_weights, weighted_mean

__all__ = ["KINDS", "BOTH", "pair_kind", "grid_pair_table", "seed_grid_table", "FRACTIONS", "FLOOR_FRACTIONS"]

KINDS = ("shares_init", "shares_data", "shares_neither")
BOTH = "shares_both"  # a grid cell and its one-ulp twin
FRACTIONS = ("init_fraction", "data_fraction", "interaction_fraction")
FLOOR_FRACTIONS = ("floor_fraction", "seed_interaction_fraction")


def pair_kind(refit_a: int | str, refit_b: int | str) -> str | None:
    """Which seed two distinct refits share: "shares_init", "shares_data" or "shares_neither"; "shares_both" for
    a grid cell and its one-ulp twin; None for a twin with any other refit (a pair the decomposition leaves out)."""
    if str(refit_a) == str(refit_b):
        raise ValueError(f"refits {refit_a!r} and {refit_b!r} are the same refit")
    if ulp_perturbed(refit_a) or ulp_perturbed(refit_b):
        return BOTH if refit_seeds(refit_a) == refit_seeds(refit_b) else None
    init_a, data_a = refit_seeds(refit_a)
    init_b, data_b = refit_seeds(refit_b)
    if (init_a, data_a) == (init_b, data_b):
        raise ValueError(f"refits {refit_a!r} and {refit_b!r} are the same refit")
    if init_a == init_b:
        return "shares_init"
    return "shares_data" if data_a == data_b else "shares_neither"


def grid_pair_table(pair_stability: pd.DataFrame) -> pd.DataFrame:
    """Per ordered pair of refits and layer: mean best-match similarity over the anchor's heads, and the pair's kind.

    pair_stability: anchor_seed, pair_seed, layer, head, similarity (`headstab.stability.pair_stability_table`,
    same-layer scope). Returns anchor_seed, pair_seed, layer, stability, kind; pairs of a one-ulp twin with a refit
    other than its cell are left out.
    """
    pairs = (
        pair_stability.groupby(["anchor_seed", "pair_seed", "layer"], sort=True)["similarity"]
        .mean()
        .rename("stability")
        .reset_index()
    )
    pairs["kind"] = [pair_kind(a, b) for a, b in zip(pairs["anchor_seed"], pairs["pair_seed"], strict=True)]
    return pairs[pairs["kind"].notna()].reset_index(drop=True)


def _statistics(stability: np.ndarray, kinds: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """The kind means and the fractions for each row of weights [boot, pair] (the floor's when there are
    shares_both pairs)."""
    present = KINDS + ((BOTH,) if (kinds == BOTH).any() else ())
    means = {kind: weighted_mean(stability, weights * (kinds == kind)[None, :]) for kind in present}
    neither = 1.0 - means["shares_neither"]
    # Pairs sharing the init differ in data order alone: what both-differ pairs lose beyond them is the init's.
    init = np.divide(
        neither - (1.0 - means["shares_init"]), neither, out=np.full_like(neither, np.nan), where=neither > 0
    )
    data = np.divide(
        neither - (1.0 - means["shares_data"]), neither, out=np.full_like(neither, np.nan), where=neither > 0
    )
    out = {**means, "init_fraction": init, "data_fraction": data, "interaction_fraction": 1.0 - init - data}
    if BOTH in means:  # what one ulp already costs, as a share of what different seeds cost
        floor = np.divide(1.0 - means[BOTH], neither, out=np.full_like(neither, np.nan), where=neither > 0)
        out |= {"floor_fraction": floor, "seed_interaction_fraction": out["interaction_fraction"] - floor}
    return out


def seed_grid_table(pairs: pd.DataFrame, n_boot: int, seed: int, confidence: float) -> pd.DataFrame:
    """Per layer: the mean pair stability of each kind and the three fractions, with refit-resampled intervals.

    pairs: `grid_pair_table` rows. Returns layer, statistic (KINDS, then FRACTIONS; with shares_both pairs also
    BOTH and FLOOR_FRACTIONS), estimate, ci_low, ci_high, n_pairs (ordered pairs of that kind; all pairs for a
    fraction), n_boot, calibration (whether the interval is calibrated at the grid's number of cells,
    `headstab.statistics.calibration`).
    """
    missing = [kind for kind in KINDS if not (pairs["kind"] == kind).any()]
    if missing:
        raise ValueError(
            f"the seed grid has no pair that {', '.join(missing)}: give at least 2 init seeds and 2 data seeds"
        )
    names = set(pairs["anchor_seed"]) | set(pairs["pair_seed"])
    cells = {refit_seeds(name): name for name in names if not ulp_perturbed(name)}

    def unit(name: int | str) -> int | str:
        """A one-ulp twin is resampled with its cell (a paper refit where the grid reuses one)."""
        return cells.get(refit_seeds(name), unperturbed(name)) if ulp_perturbed(name) else name

    refits = sorted({unit(name) for name in names}, key=str)
    index = {name: i for i, name in enumerate(refits)}
    means = calibration_label("refit_bootstrap_seed_grid_means", len(refits))
    fractions = calibration_label("refit_bootstrap_seed_grid_fractions", len(refits))
    counts = draw_resamples(n_boot, len(refits), 1, seed).refit_counts
    rows = []
    for layer, group in pairs.groupby("layer", sort=True):
        stability = group["stability"].to_numpy(np.float64)
        kinds = group["kind"].to_numpy()
        units = np.stack(
            [group[side].map(lambda name: index[unit(name)]) for side in ("anchor_seed", "pair_seed")], axis=1
        )
        estimate = _statistics(stability, kinds, np.ones((1, len(group))))
        replicates = _statistics(stability, kinds, row_weights(counts, units))
        names = KINDS + FRACTIONS + ((BOTH, *FLOOR_FRACTIONS) if BOTH in estimate else ())
        for name in names:
            low, high = percentile_interval(replicates[name], confidence)
            mean = name in (*KINDS, BOTH)
            n_pairs = int((kinds == name).sum()) if mean else len(group)
            label = means if mean else fractions
            rows.append((int(layer), name, float(estimate[name][0]), float(low), float(high), n_pairs, n_boot, label))
    columns = ["layer", "statistic", "estimate", "ci_low", "ci_high", "n_pairs", "n_boot", "calibration"]
    return pd.DataFrame(rows, columns=columns)
