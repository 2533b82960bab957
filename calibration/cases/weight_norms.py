"""Weight norms against layer stability (§4.4.1, Table B.5): the Pearson p over one anchor's layers (n counts
layers), the interval of the mean r over anchors and of the partial r over every anchor's heads given entropy
(n counts anchors, i.e. refits).

The real data: an anchor's layer stability is its mean over partner refits, so anchors share their partners
(refit-specific layer offsets enter every pair a refit is in); norms and stability both vary smoothly with
depth (norms grow, stability dips at mid-depth), so neighbouring layers are alike; heads of a refit share its
scale.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from calibration.simulate import anchor_layer_values, clustered_rows, depth_profile
from headstab.sections.weight_norms import head_norm_partial_table, norm_stability_correlation, weight_norm_summary

N_BOOT = 1000
PARTNERS = 5  # refits behind each anchor's layer stability in the layer cases (n counts layers there)


def _correlations(norm: np.ndarray, stability: np.ndarray) -> pd.DataFrame:
    """norm_stability_correlation of [anchor, layer] W_Q norms and layer stabilities (each anchor its refit)."""
    anchors, layers = np.indices(norm.shape)
    norms = pd.DataFrame(
        {"seed": anchors.ravel(), "layer": layers.ravel(), "matrix": "W_Q", "frobenius_norm": norm.ravel()}
    )
    norms["whole_layer_norm"] = norms["frobenius_norm"]
    layer_stability = pd.DataFrame(
        {"anchor_seed": anchors.ravel(), "layer": layers.ravel(), "mean": stability.ravel(), "entropy": np.nan}
    )
    return norm_stability_correlation(norms, layer_stability, promptset=None, scope=None)


def _layer_p(smooth: bool):
    """The first anchor's p over n layers: layers independent, or norm and stability each a smooth profile over
    depth (AR(1), neighbouring layers correlated 0.7) with no relation between the two."""

    def simulate(rng: np.random.Generator, n: int) -> float:
        if smooth:
            norm_profile, stability_profile = depth_profile(rng, n, 0.7, 0.1), depth_profile(rng, n, 0.7, 0.05)
        else:
            norm_profile, stability_profile = rng.normal(scale=0.1, size=n), rng.normal(scale=0.05, size=n)
        offsets = rng.normal(scale=0.02, size=(PARTNERS, n))
        stability = anchor_layer_values(rng, 0.5 + stability_profile, offsets, pair_sd=0.02)[:1]
        norm = 1.0 + norm_profile[None, :] + rng.normal(scale=0.02, size=(1, n))
        return float(_correlations(norm, stability)["p_value"].iloc[0])

    return simulate


# One architecture of 4 layers: stability dips at mid-depth, norms grow; a refit whose layer is sharper has a
# larger norm there (its offsets correlated 0.6).
STABILITY_PROFILE = np.array([0.60, 0.45, 0.42, 0.55])
NORM_PROFILE = np.array([1.00, 1.10, 1.25, 1.40])


def _anchor_data(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    offsets = rng.normal(scale=0.03, size=(n, len(STABILITY_PROFILE)))
    norm_offsets = 0.05 * (0.6 * offsets / 0.03 + 0.8 * rng.normal(size=offsets.shape))
    stability = anchor_layer_values(rng, STABILITY_PROFILE, offsets, pair_sd=0.02)
    return NORM_PROFILE + norm_offsets, stability


_MEAN_R: dict[int, float] = {}


def _expected_mean_r(n: int) -> float:
    """E[mean over anchors of r] in a study of n refits (anchors share partners, so it depends on n)."""
    if n not in _MEAN_R:
        rng = np.random.default_rng([7, n])
        values = []
        for _ in range(max(20000 // n, 400)):
            norm, stability = _anchor_data(rng, n)
            norm = norm - norm.mean(axis=1, keepdims=True)
            stability = stability - stability.mean(axis=1, keepdims=True)
            values.append(np.mean((norm * stability).sum(1) / np.sqrt((norm**2).sum(1) * (stability**2).sum(1))))
        _MEAN_R[n] = float(np.mean(values))
    return _MEAN_R[n]


def _mean_r_interval(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    summary = weight_norm_summary(
        {"arch": _correlations(*_anchor_data(rng, n))},
        {"arch": {}},
        {"arch": 0},
        intervals={"n_boot": N_BOOT, "seed": int(rng.integers(2**31)), "confidence": 0.95},
    )
    row = summary.iloc[0]
    return float(row["mean_pearson_r_ci_low"]), float(row["mean_pearson_r_ci_high"]), _expected_mean_r(n)


# Per layer, over every anchor's 8 heads: (norm, stability, entropy) of a head = the refit's share (its scale,
# its partners) + the head's own. Sharper heads (lower entropy) have lower stability and larger norms.
BETWEEN = np.array([[0.50, 0.10, 0.00], [0.10, 0.30, -0.05], [0.00, -0.05, 0.20]])
WITHIN = np.array([[1.00, 0.30, 0.50], [0.30, 1.00, -0.50], [0.50, -0.50, 1.00]])
HEADS = 8


def _partial_r(covariance: np.ndarray) -> float:
    precision = np.linalg.inv(covariance)
    return float(-precision[0, 1] / np.sqrt(precision[0, 0] * precision[1, 1]))


def _partial_interval(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    values, refit = clustered_rows(rng, n, HEADS, BETWEEN, WITHIN)
    head = np.tile(np.arange(HEADS), n)
    norms = pd.DataFrame({"seed": refit, "layer": 0, "head": head, "matrix": "W_Q", "frobenius_norm": values[:, 0]})
    stability = pd.DataFrame(
        {
            "promptset": "primary",
            "scope": "same_layer",
            "anchor_seed": refit,
            "layer": 0,
            "head": head,
            "stability": values[:, 1],
            "entropy": values[:, 2],
        }
    )
    table = head_norm_partial_table(
        norms, stability, promptset="primary", n_boot=N_BOOT, seed=int(rng.integers(2**31)), confidence=0.95
    )
    row = table.iloc[0]
    return float(row["partial_r_ci_low"]), float(row["partial_r_ci_high"]), _partial_r(BETWEEN + WITHIN)


CASES = [
    Case("pearson_t_weight_norm_layers", "independent_layers", "size", _layer_p(False), reps=1000, quick_reps=80),
    Case("pearson_t_weight_norm_layers", "smooth_depth_profiles", "size", _layer_p(True), reps=1000, quick_reps=80),
    Case(
        "anchor_bootstrap_mean_r_weight_norm",
        "shared_partners",
        "coverage",
        _mean_r_interval,
        reps=1000,
        quick_n=4,
        quick_reps=40,
    ),
    Case(
        "anchor_bootstrap_partial_r_weight_norm",
        "heads_share_their_refit",
        "coverage",
        _partial_interval,
        reps=1000,
        quick_n=5,
        quick_reps=60,
    ),
]
