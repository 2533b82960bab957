"""Adam vs AdamW (§4.5): every p-value and interval of optimizer_tests.csv, through the workflow's own
`optimizer_tests` on simulated optimizer pairs (calibration/simulate.py: refit s of both members from one seed, refit
effects correlated 0.5, the same prompts, perplexities correlated 0.8), and the power of its claims.

Each dataset is one pair of studies of n seeds (as calibration/cases/stability.py's: 20 groups of 5 prompts and
2 layers of 4 heads, at 50 seeds 10 groups of 10 prompts and 3 heads; observed,
null and content tensors) with a 100-resample bootstrap and 2,000 permutations or sign vectors; 300 datasets per
n (150 at 50 seeds). Size: the members are one population (the optimizer changes nothing), members paired (refit
effects correlated 0.5, prompt draws 0.8, perplexities 0.8) with a clear best match, or independent (refits trained
elsewhere) with exchangeable candidates and heavy-tailed perplexities (Student t, 3 degrees); the perplexity
difference sits on the equivalence margin (2% of the Adam mean), TOST's hardest null. Coverage: those, AdamW's
floors raised by 0.02, or AdamW with a clear best match where Adam has exchangeable candidates.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from calibration.cases.stability import above_null_parts
from calibration.harness import Case, PowerCase
from calibration.simulate import (
    SCENARIOS,
    OptimizerPairScenario,
    Scenario,
    at_refits,
    one_thread,
    shared_draws,
    simulate_optimizer_pair,
    symmetric_pair_values,
    true_stability,
)
from headstab.sections.optimizer_tests import optimizer_tests
from headstab.statistics.hypothesis import pair_pseudo_values, sign_flip_test
from headstab.statistics.jackknife import jackknife_parts, jackknife_t_interval

PERMUTATIONS = 2000
N_BOOT = 100
REPS = 300
REPS_BY_N = ((50, 150),)
MARGIN = 0.02  # statistics.perplexity_margin
CLEAR, EXCHANGEABLE = SCENARIOS["clear_best_match"], SCENARIOS["exchangeable_candidates"]


def _raised(scenario: Scenario, shift: float) -> Scenario:
    """The scenario with the trained refits' observed floors raised by `shift` (the null and content unchanged)."""
    return replace(scenario, observed=scenario.observed.shifted(shift))


BOUNDARY = MARGIN * 30.0  # the margin at the simulated Adam mean perplexity: TOST's hardest null
PAIRS = {
    "same_population": OptimizerPairScenario("same_population", CLEAR, CLEAR, perplexity_difference=BOUNDARY),
    "independent_exchangeable": OptimizerPairScenario(
        "independent_exchangeable",
        EXCHANGEABLE,
        EXCHANGEABLE,
        rho_refits=0.0,
        rho_prompts=0.8,  # trained elsewhere, tested on the same prompts
        rho_perplexity=0.0,
        perplexity_difference=-BOUNDARY,
        heavy_tails=True,
    ),
    "adamw_raised": OptimizerPairScenario("adamw_raised", CLEAR, _raised(CLEAR, 0.02), perplexity_difference=0.3),
    "adamw_sharper": OptimizerPairScenario("adamw_sharper", EXCHANGEABLE, CLEAR, perplexity_difference=0.3),
}
NULL_PAIRS = ("same_population", "independent_exchangeable")
STATISTICS = ("layer_stability", "layer_above_null", "layer_content_above_null")


def _truths(pair: OptimizerPairScenario) -> dict[str, np.ndarray]:
    """AdamW - Adam of each tested statistic's population value, [layer]."""
    values = {}
    for member in ("adam", "adamw"):
        scenario = getattr(pair, member)
        layer = {
            kind: true_stability(getattr(scenario, kind))["layer"]
            for kind in ("observed", "null", "content", "content_null")
        }
        values[member] = {
            "layer_stability": layer["observed"],
            "layer_above_null": layer["observed"] - layer["null"],
            "layer_content_above_null": layer["content"] - layer["content_null"],
        }
    return {statistic: values["adamw"][statistic] - values["adam"][statistic] for statistic in STATISTICS}


def _outcomes(table, pair: OptimizerPairScenario) -> dict:
    """{(quantity, statistic, layer): p-value or (low, high, truth)} of one dataset."""
    truths, out = _truths(pair), {}
    for statistic in STATISTICS:
        rows = table[table["statistic"] == statistic].set_index("layer")
        for layer in rows.index:
            truth = truths[statistic][layer]
            out["jackknife_p", statistic, layer] = rows["p_value"][layer]
            out["unpaired_jackknife_p", statistic, layer] = rows["unpaired_p_value"][layer]
            out["sign_flip", statistic, layer] = rows["sign_flip_p_value"][layer]
            out["permutation", statistic, layer] = rows["permutation_p_value"][layer]
            for quantity, prefix in (("paired_ci", ""), ("unpaired_ci", "unpaired_"), ("jackknife", "jackknife_"),
                                     ("unpaired_jackknife", "unpaired_jackknife_"), ("partial_r", "optimizer_partial_r_")):  # fmt: skip
                value = 0.0 if quantity == "partial_r" else truth  # partial r: its population value 0 under the null
                out[quantity, statistic, layer] = (
                    rows[f"{prefix}ci_low"][layer],
                    rows[f"{prefix}ci_high"][layer],
                    value,
                )
    ppl = table[table["statistic"] == "perplexity"].iloc[0]
    out["tost_paired", "perplexity", -1] = ppl["p_value"]
    out["tost_welch", "perplexity", -1] = ppl["unpaired_p_value"]
    out["tost_paired_ci", "perplexity", -1] = (ppl["ci_low"], ppl["ci_high"], pair.perplexity_difference)
    out["tost_welch_ci", "perplexity", -1] = (
        ppl["unpaired_ci_low"],
        ppl["unpaired_ci_high"],
        pair.perplexity_difference,
    )
    return out


def _study(pair: OptimizerPairScenario):
    def study(rng: np.random.Generator, n: int) -> dict:
        sized = at_refits(pair, n)
        data = simulate_optimizer_pair(rng, sized, n)
        table = optimizer_tests(
            data["adam"], data["adamw"], data["ppl_adam"], data["ppl_adamw"], n_boot=N_BOOT,
            permutations=PERMUTATIONS, seed=int(rng.integers(2**31)), confidence=0.95,
            perplexity_margin=MARGIN, paired=True,
        )  # fmt: skip
        return _outcomes(table, sized)

    return shared_draws(one_thread(study))


def _paired_p(rng: np.random.Generator, n: int, effect: float = 0.0) -> float:
    """The members share each seed's effect; AdamW adds `effect` to every pair; p of the two-sided sign-flip test."""
    shared = rng.normal(scale=0.05, size=n)
    adam = symmetric_pair_values(rng, shared, pair_sd=0.03)
    adamw = symmetric_pair_values(rng, shared, pair_sd=0.03) + effect
    d = pair_pseudo_values(adamw) - pair_pseudo_values(adam)
    return float(sign_flip_test(d, PERMUTATIONS, int(rng.integers(2**31)))["p_value"])


# method -> (quantity, kind, pair scenarios, level)
METHOD_QUANTITIES = {
    "jackknife_paired_p": ("jackknife_p", "size", NULL_PAIRS, 0.95),
    "jackknife_unpaired_p": ("unpaired_jackknife_p", "size", NULL_PAIRS, 0.95),
    "sign_flip_paired": ("sign_flip", "size", NULL_PAIRS, 0.95),
    "permutation_unpaired": ("permutation", "size", NULL_PAIRS, 0.95),
    "multibootstrap_paired_difference": ("paired_ci", "coverage", tuple(PAIRS), 0.95),
    "multibootstrap_unpaired_difference": ("unpaired_ci", "coverage", tuple(PAIRS), 0.95),
    "jackknife_paired_difference": ("jackknife", "coverage", tuple(PAIRS), 0.95),
    "jackknife_unpaired_difference": ("unpaired_jackknife", "coverage", tuple(PAIRS), 0.95),
    "partial_r_optimizer": ("partial_r", "coverage", NULL_PAIRS, 0.95),
}
PERPLEXITY_QUANTITIES = {
    "tost_paired": (("tost_paired", "size", 0.95), ("tost_paired_ci", "coverage", 0.9)),
    "tost_welch": (("tost_welch", "size", 0.95), ("tost_welch_ci", "coverage", 0.9)),
}


def _case(method, name, quantity, statistic, layer, kind, level, study) -> Case:
    def simulate(rng: np.random.Generator, n: int):
        return study(rng, n)[quantity, statistic, layer]

    where = f"{statistic}/layer{layer}" if layer >= 0 else statistic
    return Case(method, f"{name}/{quantity}/{where}", kind, simulate, level=level, reps=REPS, quick_n=5,
                quick_reps=20, reps_by_n=REPS_BY_N)  # fmt: skip


def _cases() -> list[Case]:
    cases = [Case("sign_flip_paired", "shared_seed_effects", "size", _paired_p, reps=1000, quick_n=5, quick_reps=200)]
    studies = {name: _study(pair) for name, pair in PAIRS.items()}
    for method, (quantity, kind, names, level) in METHOD_QUANTITIES.items():
        for name in names:
            cases += [_case(method, name, quantity, statistic, layer, kind, level, studies[name])
                      for statistic in STATISTICS for layer in (0, 1)]  # fmt: skip
    for method, quantities in PERPLEXITY_QUANTITIES.items():
        for quantity, kind, level in quantities:
            names = NULL_PAIRS if kind == "size" else tuple(PAIRS)
            cases += [_case(method, name, quantity, "perplexity", -1, kind, level, studies[name]) for name in names]
    return cases


CASES = _cases()


def _raised_pair(effect: float, n: int) -> OptimizerPairScenario:
    return at_refits(OptimizerPairScenario(f"adamw_raised_{effect}", CLEAR, _raised(CLEAR, effect)), n)


def _power_jackknife(rng: np.random.Generator, n: int, effect: float) -> float:
    """p of the paired jackknife-t test of AdamW - Adam above the null in layer 1 (the sharp layer), AdamW raised
    by `effect`: the optimizer_tests.csv p_value of that row, from its own functions."""
    data = simulate_optimizer_pair(rng, _raised_pair(effect, n), n, content=False)
    above = [above_null_parts(data[member]) for member in ("adam", "adamw")]
    parts = [jackknife_parts(*member, "pooled") for member in above]
    pseudo = [pair_pseudo_values(member[0].mean(axis=-1)) for member in above]
    d = pseudo[1] - pseudo[0]
    test = jackknife_t_interval(
        parts[1]["estimate"] - parts[0]["estimate"], d.var(axis=0, ddof=1) / n, n - 1,
        parts[1]["groups"] - parts[0]["groups"], 0.95,
    )  # fmt: skip
    return float(test["p_value"][1])


EFFECTS = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08)
POWER = [
    PowerCase("jackknife_paired_p", "AdamW - Adam in layer stability above the null (jackknife-t test)", "stability",
              _power_jackknife, EFFECTS, reps=200),
]  # fmt: skip
