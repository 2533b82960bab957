"""Residual-stream CKA per layer (§4.7): the interval of the mean CKA over distinct refit pairs, refits resampled
(pairs weighted k_a k_b), for the trained refits and for the same refits at step 0. n counts refits.

The real data: CKA of a pair is symmetric, and a refit that learned a less typical residual stream lowers every
pair it enters (a refit effect shared by its N - 1 pairs). At step 0 the refits are independently initialised
draws of one architecture: the pairs are nearly exchangeable, their CKA set by the architecture and prompts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from calibration.simulate import symmetric_pair_values
from headstab.sections.residual_cka import layer_cka_table

N_BOOT = 1000
TRAINED, STEP0 = 0.80, 0.55  # the population mean CKA of a pair


def _pairs(rng: np.random.Generator, n: int, refit_sd: float, pair_sd: float) -> np.ndarray:
    return symmetric_pair_values(rng, rng.normal(scale=refit_sd, size=n), pair_sd)


def _interval(step0: bool):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        trained = TRAINED + _pairs(rng, n, 0.05, 0.03)
        init = STEP0 + _pairs(rng, n, 0.005, 0.02)
        a, b = np.triu_indices(n, k=1)
        table = pd.DataFrame(
            {"promptset": "primary", "seed_a": a, "seed_b": b, "layer": 0, "cka": trained[a, b], "init_cka": init[a, b]}
        )
        row = layer_cka_table(table, "distinct", N_BOOT, int(rng.integers(2**31)), 0.95).iloc[0]
        if step0:
            return float(row["init_ci_low"]), float(row["init_ci_high"]), STEP0
        return float(row["ci_low"]), float(row["ci_high"]), TRAINED

    return simulate


CASES = [
    Case("pair_refit_bootstrap_residual_cka", "trained_refit_effects", "coverage", _interval(False), quick_reps=150),
    Case("pair_refit_bootstrap_residual_cka", "step0_pair_noise", "coverage", _interval(True), quick_reps=150),
]
