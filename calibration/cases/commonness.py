"""Commonness (§4.3, Eq. 10) against chance.

- commonness_prompt_groups: the percentile intervals over resampled prompt groups of `commonness.csv`
  (Eq. 10, without self, the null's and the paired difference), through
  `headstab.statistics.interval_tables.commonness_interval_table`; n counts prompt groups (2 refits of
  3 layers x 4 heads; one head drawn per dataset). Coverage of the expectation over the population of prompts.
Data: `calibration.simulate.layered_grouped_similarity` (sharper and broader layers, refit-specific
sharpness of mean zero over refits, symmetric pair blocks, prompt groups).
"""

from __future__ import annotations

import numpy as np

from calibration.harness import Case
from calibration.simulate import layered_grouped_similarity
from headstab.statistics.bootstrap import draw_resamples
from headstab.statistics.interval_tables import commonness_interval_table

N_BOOT = 1000
COLUMNS = {  # table column -> its interval's columns (Eq. 10's is affine in the one without self: not repeated)
    "commonness": ("ci_low", "ci_high"),
    "commonness_excl_self_null": ("commonness_excl_self_null_ci_low", "commonness_excl_self_null_ci_high"),
    "commonness_excl_self_above_null": (
        "commonness_excl_self_above_null_ci_low",
        "commonness_excl_self_above_null_ci_high",
    ),
}


def _mid_depth_dip(n_layers: int) -> np.ndarray:
    """-sin(pi x) over relative depth 0..1: 0 at both ends, -1 at mid-depth."""
    return -np.sin(np.pi * np.linspace(0.0, 1.0, n_layers))


def _commonness_interval(column: str, prompt_sd: float):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        stability = np.full((2, 3), 0.05)
        commonness = 0.03 + 0.02 * _mid_depth_dip(3) + rng.normal(scale=0.01, size=(2, 3))
        grouped, truth = layered_grouped_similarity(rng, n, stability, commonness, prompt_sd=(0.0, prompt_sd))
        resamples = draw_resamples(N_BOOT, 2, n, int(rng.integers(2**31)))
        table = commonness_interval_table(grouped, resamples, "primary", 0.95)
        row = int(rng.integers(len(table)))
        low, high = table.loc[row, list(COLUMNS[column])]
        return float(low), float(high), float(truth[column].ravel()[row])

    return simulate


COMMONNESS = "commonness_prompt_groups"
CASES = [
    *(
        Case(COMMONNESS, f"{column}:{scenario}", "coverage", _commonness_interval(column, sd), quick_reps=40)
        for column, scenario, sd in (
            ("commonness", "sharp_and_broad_layers", 0.0),
            ("commonness_excl_self_null", "sharp_and_broad_layers", 0.0),
            ("commonness_excl_self_above_null", "sharp_and_broad_layers", 0.0),
            ("commonness_excl_self_above_null", "shared_prompt_effects", 0.01),
        )
    ),
]
