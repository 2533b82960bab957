"""Initialisation seed vs data-order seed (beyond the paper): the intervals of seed_grid.csv, grid cells
resampled (a pair weighs k_a k_b, a one-ulp twin counts as its cell). n counts grid cells: 2 x 2, 3 x 3 (the
demo), 3 x 4, 5 x 5 (the paper's grid) and 5 x 10; a grid of 5 cells does not exist.

The real data is a crossed design: a refit's heads are x = a_init + b_data + c_cell (every pair that shares an
init seed shares its a, every pair of one data seed its b), so the pairs of a grid are dependent through both
seeds, not only through their cells. Head patterns are 16 numbers (heads by pattern dimensions), so a seed's
draw moves every pair it enters.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from headstab.sections.seed_grid import pair_kind, seed_grid_table

N_BOOT = 1000
GRIDS = {4: (2, 2), 9: (3, 3), 12: (3, 4), 25: (5, 5), 50: (5, 10)}
DIMS = 16
INIT_VAR, DATA_VAR, CELL_VAR, ULP_VAR = 0.10, 0.05, 0.10, 0.03
TOTAL = INIT_VAR + DATA_VAR + CELL_VAR
TRUTH = {
    "shares_init": 1.0 - (DATA_VAR + CELL_VAR),
    "shares_neither": 1.0 - TOTAL,
    "init_fraction": INIT_VAR / TOTAL,
    "floor_fraction": ULP_VAR / TOTAL,
}


def _pairs(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """seed_grid_table's input: pair stability 1 - mean((x_a - x_b)^2) / 2 of every ordered pair of cells, and
    of every cell with its one-ulp twin (every cell has one)."""
    inits, datas = GRIDS[n]
    a = rng.normal(scale=np.sqrt(INIT_VAR), size=(inits, 1, DIMS))
    b = rng.normal(scale=np.sqrt(DATA_VAR), size=(1, datas, DIMS))
    x = (a + b + rng.normal(scale=np.sqrt(CELL_VAR), size=(inits, datas, DIMS))).reshape(-1, DIMS)
    names = [f"{i + 1}-{d + 1}" for i in range(inits) for d in range(datas)]
    # a cell and its twin each carry their own one-ulp draw: they differ by 2 ULP_VAR, as two cells by 2 TOTAL
    twins = x + rng.normal(scale=np.sqrt(2 * ULP_VAR), size=x.shape)
    rows = []
    for i, name_a in enumerate(names):
        for j, name_b in enumerate(names):
            if i != j:
                rows.append((name_a, name_b, 1.0 - np.mean((x[i] - x[j]) ** 2) / 2))
        stability = 1.0 - np.mean((x[i] - twins[i]) ** 2) / 2
        rows += [(name_a, f"{name_a}-ulp", stability), (f"{name_a}-ulp", name_a, stability)]
    table = pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "stability"]).assign(layer=0)
    table["kind"] = [pair_kind(p, q) for p, q in zip(table["anchor_seed"], table["pair_seed"], strict=True)]
    return table


def _interval(statistic: str):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        table = seed_grid_table(_pairs(rng, n), N_BOOT, int(rng.integers(2**31)), 0.95)
        row = table[table["statistic"] == statistic].iloc[0]
        return float(row["ci_low"]), float(row["ci_high"]), TRUTH[statistic]

    return simulate


NS = (4, 9, 12, 25, 50)
# the means' and the fractions' intervals: one method each, two statistics each
STATISTICS = {
    "refit_bootstrap_seed_grid_means": ("shares_init", "shares_neither"),
    "refit_bootstrap_seed_grid_fractions": ("init_fraction", "floor_fraction"),
}
CASES = [
    Case(
        method,
        f"crossed_seeds_{statistic}",
        "coverage",
        _interval(statistic),
        reps=500,
        quick_n=9,
        quick_reps=100,
        ns=NS,
    )
    for method, statistics in STATISTICS.items()
    for statistic in statistics
]
