"""Head types: the exact share intervals, the exact paired test of step 0 vs trained, and the universality
table's refit-resampled intervals, each through the project's own functions on simulated typed refits.

Scores carry the dependence real refits have: a refit-specific offset per layer (mean zero over refits)
shared by the layer's heads, and layers of different sharpness (different spreads); the paired test's two
sides share each refit's offsets. The universality cases draw refits with their own propensity for the type
(1 + Binomial(H - 1, pi_r) typed heads, pi_r ~ Beta(2, 4)), partners that pick a typed head with probability
KAPPA on average (each refit its own rate, the pair the mean of its two) and a random head otherwise (so
the chance-corrected strong universality is KAPPA), and head stability
built from symmetric pair blocks with refit effects of mean zero (so its population mean is 0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.polynomial.hermite_e import hermegauss
from scipy.stats import norm

from calibration.harness import Case, PowerCase
from calibration.simulate import symmetric_pair_values
from headstab.head_type_thresholds import fixed_thresholds, type_heads
from headstab.head_types import CRITERIA, SCORE_COLUMNS
from headstab.sections.head_types import universality_table
from headstab.sections.trained_in import paired_rows, weak_universality

CONFIDENCE, N_BOOT = 0.95, 1000
N_HEADS = 8
# Two layers, one sharp (its heads' scores spread widely) and one broad; refit offsets of s.d. OFFSET_SD.
LAYER_MEAN, LAYER_SD, OFFSET_SD, THRESHOLD = np.array([0.1, 0.05]), np.array([0.12, 0.03]), 0.05, 0.4
KAPPA, BETA = 0.5, (2.0, 4.0)
THRESHOLDS = fixed_thresholds(dict.fromkeys(CRITERIA, THRESHOLD), len(LAYER_MEAN), {})


def _typed(scores: np.ndarray) -> pd.DataFrame:
    """head_types.csv rows (type_heads) of refits 1..n whose previous-token scores are `scores` [refit, layer, head]
    and whose other scores are 0."""
    refit, layer, head = (axis.ravel() for axis in np.indices(scores.shape))
    table = pd.DataFrame({"refit": refit + 1, "layer": layer, "head": head})
    table = table.assign(**dict.fromkeys(SCORE_COLUMNS, 0.0)).assign(previous_token=scores.ravel())
    return type_heads(table, THRESHOLDS)


def _scores(rng: np.random.Generator, offsets: np.ndarray) -> np.ndarray:
    """[refit, layer, head] scores: layer mean + the refit's offset + head noise of the layer's spread."""
    noise = rng.normal(size=(*offsets.shape, N_HEADS)) * LAYER_SD[None, :, None]
    return LAYER_MEAN[None, :, None] + offsets[..., None] + noise


def _offsets(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(scale=OFFSET_SD, size=(n, len(LAYER_MEAN)))


def _presence_probability(layer: int) -> float:
    """P(some head of the layer exceeds THRESHOLD) over refits: E_u[1 - Phi((t - mean - u) / sd)^H]."""
    nodes, weights = hermegauss(80)
    inside = norm.cdf((THRESHOLD - LAYER_MEAN[layer] - OFFSET_SD * nodes) / LAYER_SD[layer]) ** N_HEADS
    return float(np.sum(weights * (1 - inside)) / np.sum(weights))


PRESENCE = [_presence_probability(layer) for layer in range(len(LAYER_MEAN))]


def _share_coverage(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    """The sharp layer's weak universality through thresholds crossed by noisy scores."""
    _, low, high, _ = weak_universality(_typed(_scores(rng, _offsets(rng, n))), "previous_token", 0, CONFIDENCE)
    return low, high, PRESENCE[0]


def _share_coverage_near_one(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    """A type planted in each refit with probability 0.95 (one head at 0.8), the rest at the broad layer's scores."""
    scores = _scores(rng, _offsets(rng, n))
    planted = rng.random(n) < 0.95
    scores[planted, 1, 0] = 0.8
    _, low, high, _ = weak_universality(_typed(scores), "previous_token", 1, CONFIDENCE)
    return low, high, 0.95 + 0.05 * PRESENCE[1]


def _paired_p(rng: np.random.Generator, n: int, effect: float = 0.0, shift: float = 0.0) -> float:
    """Step 0 and trained share each refit's layer offsets; the trained side gains a planted head of the type in
    a refit with probability `effect`. p of the exact paired test in the sharp layer, its scores raised by `shift`."""
    offsets = _offsets(rng, n) + shift
    before, after = _scores(rng, offsets), _scores(rng, offsets)
    after[rng.random(n) < effect, 0, 0] = 0.8
    rows = paired_rows(_typed(after), _typed(before), CONFIDENCE)
    return float(rows.loc[(rows["layer"] == 0) & (rows["type"] == "previous_token"), "p_value"].iloc[0])


def _paired_common_p(rng: np.random.Generator, n: int) -> float:
    """The null of _paired_p where about half the refits have the type on both sides (many discordant pairs)."""
    return _paired_p(rng, n, shift=0.12)


def _universality_frames(rng: np.random.Generator, n: int, spread: float = 0.2) -> tuple:
    """types, pairs and heads tables of n refits with one layer of N_HEADS heads (module docstring)."""
    seeds = list(range(1, n + 1))
    count = 1 + rng.binomial(N_HEADS - 1, rng.beta(*BETA, size=n))
    member = np.argsort(rng.random((n, N_HEADS)), axis=1) < count[:, None]
    types = pd.DataFrame({"refit": np.repeat(seeds, N_HEADS), "layer": 0, "head": np.tile(np.arange(N_HEADS), n)})
    types = types.assign(type=np.where(member, "previous_token", "none").ravel(), threshold_rule="fixed")
    a, b = (axis.ravel() for axis in np.nonzero(~np.eye(n, dtype=bool)))
    a, b, head = np.repeat(a, N_HEADS), np.repeat(b, N_HEADS), np.tile(np.arange(N_HEADS), len(a))
    partner = rng.integers(N_HEADS, size=a.size)
    # a typed anchor head picks one of the pair refit's typed heads with probability KAPPA
    typed_rank = rng.integers(np.iinfo(np.int32).max, size=a.size) % count[b]
    typed_heads = np.argsort(~member, axis=1, kind="stable")  # each refit's typed heads first
    agreement = KAPPA + rng.uniform(-spread, spread, size=n)  # refit-specific, mean zero over refits
    chosen = member[a, head] & (rng.random(a.size) < (agreement[a] + agreement[b]) / 2)
    partner[chosen] = typed_heads[b[chosen], typed_rank[chosen]]
    # pair similarity: symmetric pair blocks with refit effects of mean zero, plus each anchor head's own offset
    pair_values = symmetric_pair_values(rng, rng.normal(scale=0.05, size=n), pair_sd=0.03)
    head_offset = rng.normal(scale=0.05, size=(n, N_HEADS))
    similarity = pair_values[a, b] + head_offset[a, head]
    pairs = pd.DataFrame(
        {"anchor_seed": np.asarray(seeds)[a], "pair_seed": np.asarray(seeds)[b], "layer": 0, "head": head}
    ).assign(best_head=partner, similarity=similarity, assigned_head=partner, assigned_similarity=similarity)
    stability = pair_values.sum(axis=1)[:, None] / (n - 1) + head_offset  # head stability: the mean over pairs
    heads = types[["refit", "layer", "head"]].rename(columns={"refit": "anchor_seed"})
    heads = heads.assign(above_null=stability.ravel(), one_to_one_above_null=stability.ravel())
    return seeds, types, pairs, heads


MEAN_TYPED = 1 + (N_HEADS - 1) * BETA[0] / sum(BETA)  # E[typed heads per refit]
# E[sum C_ab (kappa_ab + (1 - kappa_ab) s_b)] / E[sum C_ab] with C_ab = K_a, s_b = K_b / H independent of a's
RAW_STRONG = KAPPA + (1 - KAPPA) * MEAN_TYPED / N_HEADS


def _universality_interval(statistic: str, truth: float, spread: float = 0.2):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        seeds, types, pairs, heads = _universality_frames(rng, n, spread)
        table = universality_table(
            types, pairs, heads, seeds, n_boot=N_BOOT, seed=int(rng.integers(2**31)), confidence=CONFIDENCE
        )
        row = table[(table["type"] == "previous_token") & (table["statistic"] == statistic)].iloc[0]
        return float(row["ci_low"]), float(row["ci_high"]), truth

    return simulate


CASES = [
    Case("refit_share_exact", "refit_layer_offsets_sharp_layer", "coverage", _share_coverage, quick_reps=100),
    Case("refit_share_exact", "planted_share_0.95", "coverage", _share_coverage_near_one, quick_n=5, quick_reps=100),
    Case("paired_exact_mcnemar", "shared_refit_offsets", "size", _paired_p, quick_n=12, quick_reps=60),
    Case("paired_exact_mcnemar", "common_type_shared_offsets", "size", _paired_common_p, quick_n=12, quick_reps=60),
]
CASES += [
    Case(method, scenario, "coverage", _universality_interval(statistic, truth, spread), reps=400, quick_reps=100)
    for method, scenario, statistic, truth, spread in (
        ("head_type_share_bootstrap", "refit_propensities", "head_share", MEAN_TYPED / N_HEADS, 0.2),
        (
            "strong_universality_bootstrap",
            "kappa_0.5_corrected",
            "strong_universality_best_match_corrected",
            KAPPA,
            0.2,
        ),
        ("strong_universality_bootstrap", "kappa_0.5_raw", "strong_universality_best_match", RAW_STRONG, 0.2),
        (
            "strong_universality_bootstrap",
            "kappa_0.5_wide_refit_agreement",
            "strong_universality_one_to_one_corrected",
            KAPPA,
            0.45,
        ),
        ("head_type_pair_bootstrap", "symmetric_pair_blocks", "stability", 0.0, 0.2),
        ("head_type_anchor_bootstrap", "symmetric_pair_blocks", "above_null", 0.0, 0.2),
    )
]
POWER = [
    PowerCase(
        "paired_exact_mcnemar",
        "training adds a head type to a layer (share of refits that gain it)",
        "share of refits",
        _paired_p,
        effects=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    )
]
