"""Adam vs AdamW validation perplexity (§4.5, §B.7 figures): the Welch and Brunner-Munzel difference tests of
perplexity.csv. n counts refits per optimizer.

The optimizer pairs trained here share each seed's initial weights and data order, so refit s of Adam and refit s of
AdamW are alike (a seed that trains worse does so under both optimizers); the two-sample tests ignore it.
Perplexities are skewed (a refit that trains worse costs more than one that trains better gains) and the two
optimizers need not spread alike: a rank test whose null is "the same distribution" (Mann-Whitney) then
rejects when only the spread differs (6.9% of 2000 datasets at 50 refits per optimizer, spreads 3 to 1), so the
rank test is Brunner-Munzel's, whose null is P(Adam < AdamW) = 1/2.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from calibration.harness import Case, PowerCase
from headstab.sections.optimizers import perplexity_comparison

BASE = np.log(30.0)  # a demo-scale validation perplexity
PERMUTATIONS = 999


def _shared_seeds(rng: np.random.Generator, n: int, effect: float) -> tuple[np.ndarray, np.ndarray]:
    """log-perplexity = base + the seed's effect (shared by the members) + the refit's own; AdamW adds `effect`."""
    seed = rng.normal(scale=0.03, size=n)
    adam = np.exp(BASE + seed + rng.normal(scale=0.015, size=n))
    adamw = np.exp(BASE + seed + rng.normal(scale=0.015, size=n)) * (1.0 + effect)
    return adam, adamw


def _skewed(rng: np.random.Generator, n: int, effect: float) -> tuple[np.ndarray, np.ndarray]:
    """Independent refits, log-perplexity with a right tail: one refit in ten trains 10% worse."""

    def draw() -> np.ndarray:
        return np.exp(BASE + rng.normal(scale=0.02, size=n) + np.log(1.1) * (rng.random(n) < 0.1))

    return draw(), draw() * (1.0 + effect)


def _unequal_spread(rng: np.random.Generator, n: int, effect: float) -> tuple[np.ndarray, np.ndarray]:
    """The same median, AdamW's refits spread a third as much as Adam's (symmetric, so neither is ahead)."""
    adam = 30.0 + rng.normal(scale=0.9, size=n)
    adamw = (30.0 + rng.normal(scale=0.3, size=n)) * (1.0 + effect)
    return adam, adamw


SCENARIOS = {"shared_seed_effects": _shared_seeds, "skewed_refits": _skewed, "unequal_spread": _unequal_spread}


def _p(key: str, draw: Callable) -> Callable[[np.random.Generator, int, float], float]:
    def simulate(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
        permutations = PERMUTATIONS if key == "brunner_munzel_p" else 1  # the rank test only for its own case
        return perplexity_comparison(*draw(rng, n, effect), permutations, int(rng.integers(2**31)))[key]

    return simulate


CASES = [
    Case(method, scenario, "size", _p(key, draw), reps=1000, quick_n=5, quick_reps=150)
    for method, key in (("welch_t_perplexity", "welch_p"), ("brunner_munzel_perplexity", "brunner_munzel_p"))
    for scenario, draw in SCENARIOS.items()
]
POWER = [
    PowerCase(
        method,
        "AdamW changes validation perplexity",
        "relative perplexity difference",
        _p(key, _shared_seeds),
        effects=(0.005, 0.01, 0.02, 0.04, 0.08),
    )
    for method, key in (("welch_t_perplexity", "welch_p"), ("brunner_munzel_perplexity", "brunner_munzel_p"))
]
