"""The p-values and intervals of the analyses beyond the paper (docs/beyond_the_paper.md), as the fields of
`headstab.statistics.calibration.Method` (name, reports, unit, min_n, statistic); the registry holds them in METHODS."""

from __future__ import annotations

__all__ = ["BEYOND_METHODS"]

BEYOND_METHODS: tuple[tuple[str, str, str, int | None, str], ...] = (
    (
        "noise_ceiling_refit_bootstrap",
        "interval",
        "refits",
        None,
        "refit-resampled percentile interval (refit a weighs k_a, pair (a, b) k_a k_b) of the within-refit "
        "reliability of head types, their cross-seed agreement and its attenuation-corrected form (noise_ceiling.csv)",
    ),
)
