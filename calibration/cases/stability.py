"""Stability's intervals (§4.1-§4.6): every multi-bootstrap percentile interval of the head, layer, pooled, gap and
along-training tables, and the jackknife-t intervals beside them, on prompt-group similarity simulated with the
real data's dependence (calibration/simulate.py), through the workflow's own `interval_tables` and
`stability_along_training`.

Each dataset is one study of n refits: 20 prompt groups of 5 prompts, 2 layers (a broad one and a sharp one) of
4 heads, observed and null tensors, the content variant and step-0 refits (at 50 refits 3 heads and 10 groups of
10 prompts); the bootstrap draws 400 resamples (200 at 50 refits); 500 datasets per n (200 at 50 refits). Every case of a scenario reads the same
datasets (`shared_draws`): one interval per dataset, of anchor seed 1's head 0 for the per-anchor tables.
"""

from __future__ import annotations

import numpy as np

from calibration.harness import Case, PowerCase
from calibration.simulate import (
    SCENARIOS,
    at_refits,
    draw_refits,
    one_thread,
    shared_draws,
    simulate_dataset,
    simulate_grouped,
    true_one_to_one,
    true_stability,
)
from headstab.sections.training_dynamics import stability_along_training
from headstab.similarity.prompt_groups import GroupedSimilarity, group_mean
from headstab.statistics.bootstrap import best_match
from headstab.statistics.interval_tables import interval_tables
from headstab.statistics.jackknife import jackknife_parts, jackknife_t_interval, leave_one_group_out

N_BOOT = {50: 200}  # default 400
REPS = 500
REPS_BY_N = ((50, 200),)
LAYERS = {"broad_layer": 0, "sharp_layer": 1}


def _rows(table, scope: str, **keys):
    rows = table[table["scope"] == scope] if "scope" in table.columns else table
    for column, value in keys.items():
        rows = rows[rows[column] == value]
    return rows.set_index("layer")


def _intervals(tables: dict, training, scenario, data) -> dict[tuple[str, int], tuple[float, float, float]]:
    """{(quantity, layer): (low, high, truth)} of one dataset."""
    pooled, cross = _rows(tables["pooled"], "same_layer"), _rows(tables["pooled"], "cross_layer")
    anchor = _rows(tables["layer"], "same_layer", anchor_seed=1)
    head = _rows(tables["head"], "same_layer", anchor_seed=1, head=0)
    final, step0 = _rows(training, "", step=1), _rows(training, "", step=0)
    observed, null = true_stability(scenario.observed, data.refits), true_stability(scenario.null, data.refits)
    content, content_null = true_stability(scenario.content), true_stability(scenario.content_null)
    init, one_to_one = true_stability(scenario.init)["layer"], true_one_to_one(scenario.observed)
    above = {key: observed[key] - null[key] for key in observed}
    # quantity -> (rows, interval column prefix, truth [layer])
    sources = {
        "pooled": (pooled, "", observed["layer"]),
        "cross_layer": (cross, "", observed["layer"]),
        "anchor_head": (head, "", observed["head"][0, :, 0]),
        "anchor_layer": (anchor, "", observed["anchor_layer"][0]),
        "null_pooled": (pooled, "null_", null["layer"]),
        "null_anchor_layer": (anchor, "null_", null["anchor_layer"][0]),
        "above_null_pooled": (pooled, "above_null_", above["layer"]),
        "above_null_anchor_layer": (anchor, "above_null_", above["anchor_layer"][0]),
        "init": (pooled, "init_", init),
        "one_to_one": (pooled, "one_to_one_", one_to_one),
        "content": (pooled, "stability_content_", content["layer"]),
        "content_above_null": (pooled, "stability_content_above_null_", content["layer"] - content_null["layer"]),
        "along_training_final": (final, "", observed["layer"]),
        "along_training_final_null": (final, "null_", null["layer"]),
        "along_training_step0": (step0, "", init),
    }
    for level, rows, index in (("pooled", pooled, ...), ("anchor_layer", anchor, 0), ("anchor_head", head, 0)):
        key = {"pooled": "layer", "anchor_layer": "anchor_layer", "anchor_head": "head"}[level]
        for prefix, truth in (("", observed), ("null_", null), ("above_null_", above)):
            values = truth[key] if level == "pooled" else truth[key][index]
            sources[f"jackknife_{prefix}{level}"] = (
                rows,
                f"{prefix}jackknife_",
                values if level != "anchor_head" else values[:, 0],
            )
    out = {}
    for quantity, (rows, prefix, truth) in sources.items():
        for layer in LAYERS.values():
            out[quantity, layer] = (rows[f"{prefix}ci_low"][layer], rows[f"{prefix}ci_high"][layer], truth[layer])
    gap = tables["gap"].set_index("statistic")
    truth = observed["layer"]
    for statistic, value in (("delta_s", np.ptp(truth)), ("s_max", truth.max()), ("r_max", (truth.argmax() + 1) / 2)):
        out[statistic, -1] = (gap["ci_low"][statistic], gap["ci_high"][statistic], float(value))
    return out


def _study(scenario):
    def study(rng: np.random.Generator, n: int):
        sized = at_refits(scenario, n)
        data = simulate_dataset(rng, sized, n)
        seed = int(rng.integers(2**31))
        tables = interval_tables(
            data.similarity, data.grouped, "primary", n_boot=N_BOOT.get(n, 400), seed=seed, confidence=0.95,
            init=data.init, permutations=100,
        )  # fmt: skip
        steps = {0: data.init, 1: data.grouped}
        training = stability_along_training(steps, "primary", N_BOOT.get(n, 400), seed, 0.95)
        return _intervals(tables, training, sized, data)

    return shared_draws(one_thread(study))


LEVELS = ("pooled", "anchor_layer", "anchor_head")
# method -> the quantities its cases cover
METHOD_QUANTITIES = {
    "multibootstrap_pooled": ["pooled"],
    "multibootstrap_cross_layer": ["cross_layer"],
    "multibootstrap_anchor_head": ["anchor_head"],
    "multibootstrap_anchor_layer": ["anchor_layer"],
    "multibootstrap_null": ["null_pooled", "null_anchor_layer"],
    "multibootstrap_above_null": ["above_null_pooled", "above_null_anchor_layer"],
    "multibootstrap_init": ["init"],
    "multibootstrap_one_to_one": ["one_to_one"],
    "multibootstrap_content": ["content", "content_above_null"],
    "multibootstrap_along_training": ["along_training_final", "along_training_final_null", "along_training_step0"],
    **{f"jackknife_{level}": [f"jackknife_{level}", f"jackknife_null_{level}"] for level in LEVELS},
    **{f"jackknife_above_null_{level}": [f"jackknife_above_null_{level}"] for level in LEVELS},
}
GAP_STATISTICS = ("delta_s", "s_max", "r_max")


def _case(method: str, scenario: str, quantity: str, layer: int, study) -> Case:
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        return study(rng, n)[quantity, layer]

    where = next((name for name, index in LAYERS.items() if index == layer), "layers")
    return Case(
        method,
        f"{scenario}/{quantity}/{where}",
        "coverage",
        simulate,
        reps=REPS,
        quick_n=4,
        quick_reps=30,
        reps_by_n=REPS_BY_N,
    )


def _cases() -> list[Case]:
    cases = []
    for name, scenario in SCENARIOS.items():
        study = _study(scenario)
        for method, quantities in METHOD_QUANTITIES.items():
            for quantity in quantities:
                cases += [_case(method, name, quantity, layer, study) for layer in LAYERS.values()]
        cases += [_case("multibootstrap_gap", name, statistic, -1, study) for statistic in GAP_STATISTICS]
    return cases


CASES = _cases()


def above_null_parts(grouped) -> tuple[np.ndarray, np.ndarray]:
    """Full-data and leave-one-group-out best matches of stability above its null, [seed_a, seed_b, layer, head]."""
    best = {kind: best_match(group_mean(getattr(grouped, kind), grouped.group_sizes)) for kind in ("observed", "null")}
    loo = {kind: leave_one_group_out(getattr(grouped, kind), grouped.group_sizes) for kind in ("observed", "null")}
    return best["observed"] - best["null"], loo["observed"] - loo["null"]


def _power_above_null(rng: np.random.Generator, n: int, effect: float) -> float:
    """p of the pooled jackknife-t test of above_null = 0 in layer 1 (the sharp layer), the test its interval
    makes (0 outside the interval exactly when p < 0.05): the trained refits' population is the null's raised by
    `effect` (exchangeable candidates, the same refits)."""
    null = at_refits(SCENARIOS["exchangeable_candidates"], n).null
    refits = draw_refits(rng, null, n)
    observed, permuted = (simulate_grouped(rng, model, refits) for model in (null.shifted(effect), null))
    sizes = np.full(null.n_groups, null.group_size)
    grouped = GroupedSimilarity(observed, permuted, sizes, list(range(n)), np.zeros(0, int), np.zeros(0, int))
    parts = jackknife_parts(*above_null_parts(grouped), "pooled")
    interval = jackknife_t_interval(parts["estimate"], parts["refit_var"], parts["refit_df"], parts["groups"], 0.95)
    return float(interval["p_value"][1])


POWER = [
    PowerCase("jackknife_above_null_pooled", "layer stability above its null (jackknife-t interval)", "stability",
              _power_above_null, (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08), reps=200),
]  # fmt: skip
