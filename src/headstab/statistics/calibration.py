"""Which of the workflow's p-values and intervals are calibrated, and at how many units (docs/statistics.md).

Every kind of p-value and interval that a table prints is a `Method` here. `make calibration`
(calibration/run.py) simulates data with the dependence the real data has, at n = CALIBRATION_NS units, and
measures each test's size at ALPHA and each interval's coverage at its nominal level. A method passes at n
when its size is at most ALPHA + 3 Monte-Carlo standard errors, or its coverage at least the nominal level
- 3 of them, in every scenario simulated for it. `min_n` is the smallest calibrated n from which it passes
at every larger calibrated n (None: it passes at none, or was not calibrated). A table reports the method at
n units as CALIBRATED when n >= min_n and as DESCRIPTIVE otherwise: a descriptive p-value or interval says
how large a value is against its spread, never whether it differs from another.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ALPHA",
    "CALIBRATED",
    "CALIBRATION_NS",
    "DESCRIPTIVE",
    "METHODS",
    "Method",
    "calibration_label",
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


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            "sign_flip_paired",
            "p_value",
            "refits",
            5,
            "two-sided sign-flip test of per-seed jackknife pseudo-value differences (optimizer_tests.csv p_value)",
        ),
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
        12,
        "percentile interval of the mean PR over heads and refits, refits resampled "
        "(effective_rank_correlation.csv pr_mean, pr_uncentred_mean)",
    ),
    Method(
        "refit_bootstrap_pearson_effective_rank",
        "interval",
        "refits",
        12,
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
METHODS.update({method.name: method for method in _SECTION_METHODS})


def is_calibrated(method: str, n: int) -> bool:
    """Whether `method` is calibrated at n units: n >= its min_n (never when min_n is None)."""
    if method not in METHODS:
        raise KeyError(f"no calibrated method {method!r}; known: {sorted(METHODS)}")
    min_n = METHODS[method].min_n
    return min_n is not None and n >= min_n


def calibration_label(method: str, n: int) -> str:
    """CALIBRATED or DESCRIPTIVE: how a table reports `method` at n units."""
    return CALIBRATED if is_calibrated(method, n) else DESCRIPTIVE
