"""The calibration study's machinery: a Case simulates one dataset and returns a p-value or an interval;
`evaluate` repeats it and says whether the method passes at that n (docs/statistics.md, "Calibration").

A size case returns the p-value of one dataset simulated under the null; a coverage case returns
(low, high, truth) of one dataset simulated with a known true value. Pass: size <= ALPHA + 3 s.e., coverage
>= level - 3 s.e., s.e. the Monte-Carlo standard error at the nominal rate over `reps` datasets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from headstab.statistics.calibration import ALPHA, METHODS, calibration_label

__all__ = ["Case", "Outcome", "evaluate", "min_n_passing"]


@dataclass(frozen=True)
class Case:
    """One simulated scenario for one method.

    method: a key of headstab.statistics.calibration.METHODS; scenario: what the simulation plants, in words
    (e.g. "iid", "refit_layer_offsets", "sharp_and_broad_layers"); kind: "size" or "coverage";
    simulate(rng, n) -> p-value (size) or (low, high, truth) (coverage) of one dataset of n units;
    level: the interval's nominal coverage; quick_n, quick_reps: the fast form run by make test;
    reps: the full study's datasets per n; ns: the n to calibrate at (default: every CALIBRATION_NS);
    reps_by_n: ((n, reps), ...) where a large n costs too much for `reps` datasets.
    """

    method: str
    scenario: str
    kind: str
    simulate: Callable[[np.random.Generator, int], float | tuple[float, float, float]]
    level: float = 0.95
    reps: int = 1000
    quick_n: int = 12
    quick_reps: int = 200
    ns: tuple[int, ...] | None = None
    notes: str = field(default="", compare=False)
    reps_by_n: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"case {self.scenario!r}: unknown method {self.method!r}")
        if self.kind not in ("size", "coverage"):
            raise ValueError(f"case {self.method}/{self.scenario}: kind must be 'size' or 'coverage'")

    def reps_for(self, n: int) -> int:
        """The full study's datasets at n."""
        return dict(self.reps_by_n).get(n, self.reps)


@dataclass(frozen=True)
class Outcome:
    method: str
    scenario: str
    kind: str
    n: int
    reps: int
    rate: float  # rejection rate at ALPHA (size) or coverage
    mc_se: float  # Monte-Carlo s.e. at the nominal rate
    bound: float  # the pass bound: ALPHA + 3 s.e. or level - 3 s.e.
    passed: bool
    label: str  # how the workflow labels the method at n
    consistent: bool  # passed, or labelled descriptive


def evaluate(case: Case, n: int, reps: int, seed: int) -> Outcome:
    """Run `reps` datasets of `case` at n units (seeded) and compare the rate with its bound."""
    rng = np.random.default_rng([seed, n])
    hits, used = 0, 0
    for _ in range(reps):
        result = case.simulate(rng, n)
        if case.kind == "size":
            if not np.isfinite(result):
                continue  # an undefined p-value is reported as NaN, never as a rejection
            hits += bool(result <= ALPHA)
        else:
            low, high, truth = result
            if not (np.isfinite(low) and np.isfinite(high)):
                continue
            hits += bool(low <= truth <= high)
        used += 1
    nominal = ALPHA if case.kind == "size" else case.level
    mc_se = math.sqrt(nominal * (1 - nominal) / max(used, 1))
    rate = hits / used if used else float("nan")
    if case.kind == "size":
        bound = nominal + 3 * mc_se
        passed = used > 0 and rate <= bound
    else:
        bound = nominal - 3 * mc_se
        passed = used > 0 and rate >= bound
    label = calibration_label(case.method, n)
    return Outcome(
        case.method,
        case.scenario,
        case.kind,
        n,
        used,
        rate,
        mc_se,
        bound,
        passed,
        label,
        passed or label != "calibrated",
    )


def min_n_passing(outcomes: list[Outcome], ns: tuple[int, ...]) -> int | None:
    """The smallest n of `ns` from which every outcome at that n and every larger n passed (None: none)."""
    passing = None
    for n in sorted(ns, reverse=True):
        at_n = [o for o in outcomes if o.n == n]
        if not at_n or not all(o.passed for o in at_n):
            break
        passing = n
    return passing


@dataclass(frozen=True)
class PowerCase:
    """The effect a test detects with `target` power: simulate(rng, n, effect) -> p-value of one dataset with
    the effect planted (in `effect_unit`), over the grid `effects` (increasing)."""

    method: str
    claim: str
    effect_unit: str
    simulate: Callable[[np.random.Generator, int, float], float]
    effects: tuple[float, ...]
    reps: int = 400
    ns: tuple[int, ...] = (4, 5, 50)
    target: float = 0.8

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"power case {self.claim!r}: unknown method {self.method!r}")
        if list(self.effects) != sorted(self.effects):
            raise ValueError(f"power case {self.claim!r}: effects must increase")


def detectable_effect(case: PowerCase, n: int, reps: int, seed: int) -> tuple[float, float]:
    """(smallest effect of the grid rejected at ALPHA in at least `target` of `reps` datasets, its power);
    (inf, best power) when no effect of the grid reaches it (e.g. the test cannot reach ALPHA at n)."""
    best = 0.0
    for effect in case.effects:
        rng = np.random.default_rng([seed, n, int(round(effect * 1e6))])
        p_values = np.array([case.simulate(rng, n, effect) for _ in range(reps)])
        power = float(np.mean(p_values[np.isfinite(p_values)] <= ALPHA)) if np.isfinite(p_values).any() else 0.0
        best = max(best, power)
        if power >= case.target:
            return effect, power
    return math.inf, best
