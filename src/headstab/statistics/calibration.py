"""Which of the workflow's p-values and intervals are calibrated, and at how many units (docs/statistics.md).

Every kind of p-value and interval that a table prints is a `Method` here. `make calibration` (calibration/run.py)
simulates data with the dependence the real data has, at n = CALIBRATION_NS units, and measures each test's size at
ALPHA and each interval's coverage at its nominal level. A method passes at n when its size is at most ALPHA + 3
Monte-Carlo s.e., or its coverage at least the nominal level - 3 of them, in every scenario simulated for it. `min_n`
is the smallest calibrated n from which it passes at every larger calibrated n (None: it passes at none, or was not
calibrated). A table reports the method at n units as CALIBRATED when n >= min_n and as DESCRIPTIVE otherwise: a
descriptive p-value or interval says how large a value is against its spread, never whether it differs from another.
"""

from dataclasses import dataclass

from headstab.statistics.beyond_methods import BEYOND_METHODS
from headstab.statistics.neuron_methods import NEURON_METHODS  # Method fields as plain tuples: no import back

__all__ = [
    "ALPHA",
    "CALIBRATED",
    "CALIBRATION_NS",
    "DESCRIPTIVE",
    "DETECTABLE_EFFECTS",
    "METHODS",
    "Method",
    "calibration_label",
    "detectable_effect",
    "is_calibrated",
]

ALPHA = 0.05
CALIBRATION_NS = (4, 5, 12, 50)
CALIBRATED = "calibrated"
DESCRIPTIVE = "descriptive"


@dataclass(frozen=True)
class Method:
    """One kind of reported p-value or interval.

    name: its key in METHODS (the `method` column of results/calibration/summary.csv);
    reports: "p_value" or "interval"; unit: what n counts (refits, architectures, heads, ...);
    min_n: the smallest n it is calibrated at (None: descriptive at every n); statistic: what it is, in words.
    """

    name: str
    reports: str
    unit: str
    min_n: int | None
    statistic: str

    def __post_init__(self) -> None:
        if self.reports not in ("p_value", "interval"):
            raise ValueError(f"method {self.name!r}: reports must be 'p_value' or 'interval', got {self.reports!r}")
        if self.min_n is not None and self.min_n not in CALIBRATION_NS:
            raise ValueError(f"method {self.name!r}: min_n {self.min_n} is not a calibrated n of {CALIBRATION_NS}")


# The multi-bootstrap and jackknife intervals of stability's tables and the Adam vs AdamW tests
# (calibration/cases/stability.py and optimizer.py).
_INTERVALS = {
    "multibootstrap_pooled": "percentile multi-bootstrap interval of pooled layer stability (layer_stability_pooled.csv)",
    "multibootstrap_cross_layer": "percentile interval over resampled refits of cross-layer stability (cross_layer rows)",
    "multibootstrap_anchor_head": "percentile multi-bootstrap interval of an anchor's head stability (head_stability.csv)",
    "multibootstrap_anchor_layer": "percentile multi-bootstrap interval of an anchor's layer stability (layer_stability.csv)",
    "multibootstrap_null": "percentile multi-bootstrap interval of the prompt-permutation null (null_ci_low, null_ci_high)",
    "multibootstrap_above_null": "percentile interval of the paired stability - null replicates (above_null_ci_*)",
    "multibootstrap_init": "percentile multi-bootstrap interval of the same refits at step 0 (init_ci_low, init_ci_high)",
    "multibootstrap_one_to_one": "percentile interval of one-to-one stability, assignment fixed (one_to_one_*)",
    "multibootstrap_content": "percentile multi-bootstrap intervals of the content variant (stability_content_*)",
    "multibootstrap_gap": "percentile interval of ΔS and its extreme layers from the pooled replicates (stability_gap_intervals.csv)",
    "multibootstrap_along_training": "percentile multi-bootstrap interval of stability and null per step (stability_along_training.csv)",
    "jackknife_pooled": "jackknife-t interval over refits and prompt groups of pooled stability and its null",
    "jackknife_anchor_layer": "jackknife-t interval over pair refits and prompt groups of an anchor's layer stability "
    "and its null",
    "jackknife_anchor_head": "jackknife-t interval over pair refits and prompt groups of an anchor's head stability "
    "and its null",
    "jackknife_above_null_pooled": "jackknife-t interval of pooled stability - null (above_null_jackknife_*)",
    "jackknife_above_null_anchor_layer": "jackknife-t interval of an anchor's layer stability - null",
    "jackknife_above_null_anchor_head": "jackknife-t interval of an anchor's head stability - null",
    "multibootstrap_paired_difference": "paired multi-bootstrap interval of AdamW - Adam (optimizer_tests.csv ci_*)",
    "multibootstrap_unpaired_difference": "independent multi-bootstraps' interval of AdamW - Adam (unpaired_ci_*)",
    "jackknife_paired_difference": "jackknife-t interval of AdamW - Adam: per-seed pseudo-value differences and prompt groups",
    "jackknife_unpaired_difference": "jackknife-t interval of AdamW - Adam from each member's pseudo-values and prompt groups",
    "partial_r_optimizer": "seed-bootstrap interval of the partial r of head stability with the optimizer given entropy",
}
_P_VALUES = {
    "jackknife_paired_p": "two-sided jackknife-t test of AdamW - Adam over the per-seed pseudo-value differences and "
    "prompt groups (optimizer_tests.csv p_value)",
    "jackknife_unpaired_p": "two-sided jackknife-t test of AdamW - Adam, each member's pseudo-values, Welch's degrees "
    "(unpaired_p_value)",
    "tost_paired": "paired TOST of per-seed perplexity differences: p_value and its (1 - 2 alpha) t interval",
    "tost_welch": "Welch TOST of the members' perplexities: unpaired_p_value and its (1 - 2 alpha) interval",
    "permutation_unpaired": "two-sided permutation test of the optimizer labels of the refits' pseudo-values, prompts "
    "fixed (permutation_p_value)",
}
# min_n as measured by make calibration (docs/statistics.md, "Calibration").
_MIN_N: dict[str, int | None] = {
    "jackknife_pooled": 12,
    "jackknife_anchor_layer": 12,
    "jackknife_anchor_head": 4,
    "jackknife_above_null_pooled": 4,
    "jackknife_above_null_anchor_layer": 4,
    "jackknife_above_null_anchor_head": 4,
}
STABILITY_METHODS = [
    Method(name, kind, "refits", _MIN_N.get(name), statistic)
    for kind, described in (("interval", _INTERVALS), ("p_value", _P_VALUES))
    for name, statistic in described.items()
]

METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            "sign_flip_paired",
            "p_value",
            "refits",
            None,
            "two-sided sign-flip test of per-seed jackknife pseudo-value differences, prompts fixed "
            "(optimizer_tests.csv sign_flip_p_value)",
        ),
        Method(
            "commonness_prompt_groups",
            "interval",
            "prompt groups",
            50,
            "percentile interval over resampled prompt groups of a head's commonness, with and without the head "
            "itself, under the prompt-permutation null and above it (commonness.csv)",
        ),
        Method(
            "stability_commonness_joint",
            "p_value",
            "refits",
            4,
            "one-sided sign-flip test over refits of the partial correlation over layers of stability above its "
            "null with commonness without self above its null, given the layer's entropy (stability_commonness.csv)",
        ),
        # Head types: shares of refits, the paired step-0 vs trained test, and the universality table's intervals.
        Method(
            "refit_share_exact",
            "interval",
            "refits",
            4,
            "Clopper-Pearson interval of a share of refits: weak universality (head_type_universality.csv) and the "
            "trained and step-0 shares (trained_in_types.csv)",
        ),
        Method(
            "paired_exact_mcnemar",
            "p_value",
            "refits",
            4,
            "one-sided exact McNemar test that training adds a head type, step 0 vs trained on the same refits "
            "(trained_in_types.csv p_value)",
        ),
        Method(
            "head_type_share_bootstrap",
            "interval",
            "refits",
            12,
            "refit-resampled interval of the share of a layer's heads with a type (head_type_universality.csv "
            "head_share)",
        ),
        Method(
            "strong_universality_bootstrap",
            "interval",
            "refits",
            4,
            "refit-pair-resampled interval (pair (a, b) weighs k_a k_b) of strong universality, its chance level and "
            "its chance-corrected form (head_type_universality.csv strong_universality_*)",
        ),
        Method(
            "head_type_pair_bootstrap",
            "interval",
            "refits",
            50,
            "refit-pair-resampled interval (pair (a, b) weighs k_a k_b) of the mean stability of a type's heads "
            "(head_type_universality.csv stability, stability_one_to_one)",
        ),
        Method(
            "head_type_anchor_bootstrap",
            "interval",
            "refits",
            None,
            "anchor-refit-resampled interval of the mean above-null stability of a type's heads "
            "(head_type_universality.csv above_null, one_to_one_above_null)",
        ),
        Method(
            "cross_layer_sign_flip",
            "p_value",
            "refits",
            4,
            "one-sided sign-flip test over an anchor's pair refits of the cross-layer best match against the same "
            "maximum on the prompt-permutation null (head_stability.csv, layer_stability.csv cross-layer p_value)",
        ),
        Method(
            "layer_heterogeneity_sign_flip",
            "p_value",
            "refits",
            4,
            "ΔS above the null against sign flips of each refit's centred layer pseudo-values "
            "(layer_tests.csv, test layers_differ)",
        ),
        Method(
            "mid_depth_sign_flip",
            "p_value",
            "refits",
            4,
            "end layers minus interior layers of stability above the null, one-sided sign flip over refits "
            "(layer_tests.csv, test mid_depth_dip)",
        ),
        Method(
            "dip_depth_permutation",
            "p_value",
            "architectures",
            4,
            "Spearman's rho of the mid-depth dip with depth, one-sided, dips permuted over architectures "
            "(stability_gap_depth.csv, quantity mid_depth_dip)",
        ),
        Method(
            "mantel_layer_blocks",
            "p_value",
            "refits",
            4,
            "Mantel r of head-description distance with |Δ relative depth|, an architecture's layers permuted as "
            "blocks in one order shared by its refits (meta_sne_mantel.csv)",
        ),
        *STABILITY_METHODS,
    )
}


# The p-values and intervals of the other sections (Table B.5, §4.5's perplexity, §4.7, §4.8 and the analyses
# beyond the paper): docs/statistics.md, "Calibration of the section statistics".
_SECTION_METHODS = (
    Method(
        "welch_t_perplexity",
        "p_value",
        "refits per optimizer",
        4,
        "Welch two-sided t-test of the Adam and AdamW refits' validation perplexities (perplexity.csv welch_p)",
    ),
    Method(
        "brunner_munzel_perplexity",
        "p_value",
        "refits per optimizer",
        4,
        "two-sided studentized permutation Brunner-Munzel test of the same perplexities (perplexity.csv "
        "brunner_munzel_p)",
    ),
    Method(
        "pearson_t_weight_norm_layers",
        "p_value",
        "layers",
        None,
        "Pearson t-test p over one anchor's layers of a weight norm against layer stability "
        "(weight_norm_correlation.csv p_value, summary first_anchor_p)",
    ),
    Method(
        "permutation_pearson_ablation_heads",
        "p_value",
        "heads",
        4,
        "two-sided permutation p of Pearson's r over one layer's heads, head stability against ΔPPL "
        "(ablation_correlation.csv p_value)",
    ),
    Method(
        "permutation_spearman_ablation_heads",
        "p_value",
        "heads",
        4,
        "two-sided permutation p of Spearman's rho over the same heads (ablation_correlation.csv spearman_p)",
    ),
    Method(
        "linregress_trend_ablation",
        "p_value",
        "layers",
        None,
        "t-test p of the slope of the per-layer r against layer index (ablation_correlation.csv trend_p_value)",
    ),
    Method(
        "pair_refit_bootstrap_residual_cka",
        "interval",
        "refits",
        50,
        "percentile interval of the mean CKA over distinct refit pairs, refits resampled, trained and at step 0 "
        "(residual_cka_layers.csv ci_*, init_ci_*)",
    ),
    Method(
        "head_bootstrap_pearson_ablation",
        "interval",
        "heads",
        None,
        "percentile interval of Pearson's r over one layer's heads resampled (ablation_correlation.csv ci_*)",
    ),
    Method(
        "anchor_bootstrap_mean_r_weight_norm",
        "interval",
        "anchors",
        None,
        "percentile interval of the mean over anchors of the weight-norm r, anchors resampled "
        "(summary weight_norm_correlation.csv mean_pearson_r_ci_*)",
    ),
    Method(
        "anchor_bootstrap_partial_r_weight_norm",
        "interval",
        "anchors",
        50,
        "percentile interval of the partial r over every anchor's heads given entropy, anchors resampled "
        "(weight_norm_partial.csv partial_r_ci_*)",
    ),
    Method(
        "refit_bootstrap_mean_effective_rank",
        "interval",
        "refits",
        50,
        "percentile interval of the mean PR over heads and refits, refits resampled "
        "(effective_rank_correlation.csv pr_mean, pr_uncentred_mean)",
    ),
    Method(
        "refit_bootstrap_pearson_effective_rank",
        "interval",
        "refits",
        None,
        "percentile interval of Pearson's r over head (or head-pair) rows, refits resampled "
        "(effective_rank_correlation.csv pr_vs_stability, pr_anchor_vs_match, pr_uncentred_vs_stability)",
    ),
    Method(
        "refit_bootstrap_mean_layer_robustness",
        "interval",
        "refits",
        None,
        "percentile interval of a robustness metric's mean over refits, refits resampled (layer_robustness.csv)",
    ),
    Method(
        "refit_bootstrap_pearson_layer_robustness",
        "interval",
        "refits",
        None,
        "percentile interval of Pearson's r over (refit, layer) rows, refits resampled "
        "(layer_robustness_correlation.csv across_refits)",
    ),
    Method(
        "refit_bootstrap_seed_grid_means",
        "interval",
        "grid cells",
        None,
        "percentile interval of the mean pair stability of a pair kind, grid cells resampled (seed_grid.csv)",
    ),
    Method(
        "refit_bootstrap_seed_grid_fractions",
        "interval",
        "grid cells",
        None,
        "percentile interval of the init, data, interaction and floor fractions, grid cells resampled (seed_grid.csv)",
    ),
    Method(
        "range_final_loss",
        "interval",
        "refits",
        None,
        "min and max of the refits' final training losses (headline.csv final training loss): a range of the "
        "values, not a confidence interval",
    ),
)
METHODS.update({m.name: m for m in (*_SECTION_METHODS, *(Method(*f) for f in (*BEYOND_METHODS, *NEURON_METHODS)))})


def is_calibrated(method: str, n: int) -> bool:
    """Whether `method` is calibrated at n units: n >= its min_n (never when min_n is None)."""
    if method not in METHODS:
        raise KeyError(f"no calibrated method {method!r}; known: {sorted(METHODS)}")
    min_n = METHODS[method].min_n
    return min_n is not None and n >= min_n


def calibration_label(method: str, n: int) -> str:
    """CALIBRATED or DESCRIPTIVE: how a table reports `method` at n units."""
    return CALIBRATED if is_calibrated(method, n) else DESCRIPTIVE


# The effect each claim's test detects with 80% power at a study's n (make calibration's power.csv; inf: the
# test cannot reach ALPHA there), by claim: (method, the unit of the effect, {n: effect}).
DETECTABLE_EFFECTS: dict[str, tuple[str, str, dict[int, float]]] = {
    "layer stability above its null (jackknife-t interval)": (
        "jackknife_above_null_pooled",
        "stability",
        {4: 0.04, 5: 0.04, 50: 0.02},
    ),
}


def detectable_effect(claim: str, n: int) -> float:
    """The effect `claim`'s test detects with 80% power at n units: the one measured at the largest measured n
    not above n (fewer units detect no less); NaN below the smallest measured n."""
    if claim not in DETECTABLE_EFFECTS:
        raise KeyError(f"no power measured for claim {claim!r}; known: {sorted(DETECTABLE_EFFECTS)}")
    measured = DETECTABLE_EFFECTS[claim][2]
    below = [m for m in measured if m <= n]
    return measured[max(below)] if below else float("nan")
