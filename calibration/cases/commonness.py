"""Commonness (§4.3, Eq. 10) against chance, and "least stable yet most distinct" tested over refits.

- commonness_prompt_groups: the percentile intervals over resampled prompt groups of `commonness.csv`
  (Eq. 10, without self, the null's and the paired difference), through
  `headstab.statistics.interval_tables.commonness_interval_table`; n counts prompt groups (2 refits of
  3 layers x 4 heads; one head drawn per dataset). Coverage of the expectation over the population of prompts.
- stability_commonness_joint: the one-sided sign-flip test of `headstab.sections.stability_commonness` on
  the columns of the layer and commonness tables it reads, from the workflow's own estimates
  (`stability_replicates`, `commonness_table`) of simulated prompt-group tensors; n counts refits (8 layers
  x 4 heads, 8 prompt groups).
Data: `calibration.simulate.layered_grouped_similarity` (sharper and broader layers, refit-specific
sharpness of mean zero over refits, symmetric pair blocks, prompt groups).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case, PowerCase
from calibration.simulate import layered_grouped_similarity
from headstab.sections.stability_commonness import stability_commonness_table
from headstab.stability import commonness_table
from headstab.statistics.bootstrap import draw_resamples, stability_replicates
from headstab.statistics.interval_tables import commonness_interval_table

N_BOOT = 1000
PERMUTATIONS = 2000
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


def _tables(grouped) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The columns of layer_stability.csv and commonness.csv the joint test reads, from the estimates of the
    workflow's own functions (their intervals, which the test does not read, cost more than the test)."""
    resamples = draw_resamples(1, len(grouped.seeds), len(grouped.group_sizes), 0)
    head = {kind: stability_replicates(resamples, getattr(grouped, kind), grouped.group_sizes)["head_estimate"]
            for kind in ("observed", "null")}  # fmt: skip
    anchor, layer = np.indices(head["observed"].shape[:2])
    layers = pd.DataFrame(
        {
            "promptset": "primary",
            "scope": "same_layer",
            "anchor_seed": anchor.ravel(),
            "layer": layer.ravel(),
            "above_null": (head["observed"] - head["null"]).mean(axis=-1).ravel(),
            "entropy": grouped.entropy.mean(axis=-1).ravel(),
        }
    )
    observed, null = (commonness_table(grouped.mean(kind), grouped.seeds, "primary") for kind in ("observed", "null"))
    observed["commonness_excl_self_above_null"] = observed["commonness_excl_self"] - null["commonness_excl_self"]
    return layers, observed


def _joint_p(n_layers: int = 8, confound: float = 0.0, prompt_sd: tuple[float, float] = (0.0, 0.0)):
    def simulate(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
        dip = _mid_depth_dip(n_layers)
        stability = 0.05 + 0.03 * dip + rng.normal(scale=0.01, size=(n, n_layers))
        commonness = 0.02 + effect * dip + rng.normal(scale=0.01, size=(n, n_layers))
        grouped, _ = layered_grouped_similarity(rng, 8, stability, commonness, confound=confound, prompt_sd=prompt_sd)
        layers, common = _tables(grouped)
        table = stability_commonness_table(layers, common, "primary", PERMUTATIONS, int(rng.integers(2**31)))
        return float(table["p_value"].iloc[0])

    return simulate


COMMONNESS = "commonness_prompt_groups"
JOINT = "stability_commonness_joint"
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
    *(
        Case(JOINT, scenario, "size", simulate, reps=600, quick_reps=40)
        for scenario, simulate in (
            ("sharp_and_broad_layers", _joint_p()),
            ("sharpness_lowers_both", _joint_p(confound=-0.5)),
            ("four_layers", _joint_p(n_layers=4)),
            ("prompt_effects_in_stability", _joint_p(prompt_sd=(0.01, 0.0))),
        )
    ),
]
POWER = [
    PowerCase(
        JOINT,
        "commonness dips at mid-depth with stability (8 layers, refit-layer s.d. 0.01)",
        "commonness dip amplitude",
        _joint_p(),
        effects=(0.0025, 0.005, 0.01, 0.02, 0.04),
    )
]
