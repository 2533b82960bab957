"""Layer drop and swap robustness (beyond the paper): the refit-resampled interval of a metric's mean over refits
per condition and layer, and of Pearson's r with layer stability over (refit, layer) rows. n counts refits.

The real data: top-1 agreement is a share near 1, ΔPPL skewed (a refit whose layer carries more costs much
more when it is dropped); the layers of an architecture have their own robustness and stability (the layers are
fixed, the refits drawn), and a refit's layers share its offsets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from headstab.sections.layer_robustness import robustness_by_layer, robustness_correlation

N_BOOT = 1000
TOP1_A, TOP1_B = 8.0, 2.0  # a refit's top-1 agreement ~ Beta(8, 2): mean 0.8, skewed
LOG_DELTA, LOG_SD = np.log(2.0), 0.8  # a refit's ΔPPL ~ lognormal: mean exp(mu + sd^2 / 2)


def _table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "seed": np.arange(n),
            "condition": "drop",
            "layer": 0,
            "top1_agreement": rng.beta(TOP1_A, TOP1_B, size=n),
            "delta_ppl": np.exp(rng.normal(LOG_DELTA, LOG_SD, size=n)),
            "kl_divergence": rng.gamma(2.0, 0.1, size=n),
            "stability": 0.5,
        }
    )


def _mean(metric: str, truth: float):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        table = robustness_by_layer(_table(rng, n), 1, N_BOOT, int(rng.integers(2**31)), 0.95)
        row = table[table["metric"] == metric].iloc[0]
        return float(row["ci_low"]), float(row["ci_high"]), truth

    return simulate


# Four fixed layers: stability dips at mid-depth, KL of dropping a layer is largest at the first layer; a refit
# shares an offset over its layers, and within a (refit, layer) the two go together (correlation -0.5).
STABILITY = np.array([0.60, 0.45, 0.42, 0.55])
KL = np.array([0.90, 0.40, 0.35, 0.50])
REFIT_SD = np.array([0.03, 0.10])  # stability, KL
OWN = np.array([[0.02**2, -0.5 * 0.02 * 0.15], [-0.5 * 0.02 * 0.15, 0.15**2]])


def _pooled_r() -> float:
    """Pearson's r over (refit, layer) rows as the refits grow without bound, the layers fixed."""
    layers = np.cov(STABILITY, KL, ddof=0)
    cov = layers + np.diag(REFIT_SD**2) + OWN
    return float(cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1]))


def _correlation(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    shared = rng.normal(scale=REFIT_SD, size=(n, 2))
    own = rng.multivariate_normal(np.zeros(2), OWN, size=(n, len(STABILITY)))
    values = np.stack([STABILITY, KL], axis=-1)[None] + shared[:, None, :] + own  # [refit, layer, 2]
    seed, layer = np.indices(values.shape[:2])
    table = pd.DataFrame(
        {
            "seed": seed.ravel(),
            "condition": "drop",
            "layer": layer.ravel(),
            "stability": values[..., 0].ravel(),
            "kl_divergence": values[..., 1].ravel(),
            "top1_agreement": 0.8,
            "delta_ppl": 1.0,
        }
    )
    rows = robustness_correlation(table, N_BOOT, int(rng.integers(2**31)), 0.95)
    row = rows[(rows["scope"] == "across_refits") & (rows["metric"] == "kl_divergence")].iloc[0]
    return float(row["ci_low"]), float(row["ci_high"]), _pooled_r()


CASES = [
    Case(
        "refit_bootstrap_mean_layer_robustness",
        "top1_agreement_share",
        "coverage",
        _mean("top1_agreement", TOP1_A / (TOP1_A + TOP1_B)),
        quick_reps=150,
    ),
    Case(
        "refit_bootstrap_mean_layer_robustness",
        "skewed_delta_ppl",
        "coverage",
        _mean("delta_ppl", float(np.exp(LOG_DELTA + LOG_SD**2 / 2))),
        quick_reps=150,
    ),
    Case(
        "refit_bootstrap_pearson_layer_robustness",
        "fixed_layers_shared_refit_offsets",
        "coverage",
        _correlation,
        quick_reps=150,
    ),
]
