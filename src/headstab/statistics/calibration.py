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
    )
}


def is_calibrated(method: str, n: int) -> bool:
    """Whether `method` is calibrated at n units: n >= its min_n (never when min_n is None)."""
    if method not in METHODS:
        raise KeyError(f"no calibrated method {method!r}; known: {sorted(METHODS)}")
    min_n = METHODS[method].min_n
    return min_n is not None and n >= min_n


def calibration_label(method: str, n: int) -> str:
    """CALIBRATED or DESCRIPTIVE: how a table reports `method` at n units."""
    return CALIBRATED if is_calibrated(method, n) else DESCRIPTIVE
