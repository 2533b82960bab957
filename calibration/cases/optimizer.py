"""Adam vs AdamW (§4.5): the paired sign-flip test of the per-seed pseudo-value differences."""

from __future__ import annotations

import numpy as np

from calibration.harness import Case, PowerCase
from calibration.simulate import symmetric_pair_values
from headstab.statistics.hypothesis import pair_pseudo_values, sign_flip_test

PERMUTATIONS = 2000


def _paired_p(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
    """Twins share each seed's effect; AdamW adds `effect` to every pair; p of the two-sided sign-flip test."""
    shared = rng.normal(scale=0.05, size=n)
    adam = symmetric_pair_values(rng, shared, pair_sd=0.03)
    adamw = symmetric_pair_values(rng, shared, pair_sd=0.03) + effect
    d = pair_pseudo_values(adamw) - pair_pseudo_values(adam)
    return float(sign_flip_test(d, PERMUTATIONS, int(rng.integers(2**31)))["p_value"])


CASES = [Case("sign_flip_paired", "shared_seed_effects", "size", _paired_p, reps=1000, quick_n=5, quick_reps=200)]
POWER = [
    PowerCase(
        "sign_flip_paired",
        "AdamW changes pooled layer stability",
        "stability",
        _paired_p,
        effects=(0.005, 0.01, 0.02, 0.04, 0.08, 0.16),
    )
]
