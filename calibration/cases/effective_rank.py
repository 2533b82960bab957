"""Per-head effective rank (beyond the paper): the refit-resampled intervals of the mean PR over heads and refits
and of Pearson's r over head rows (PR against stability) and head-pair rows (anchor PR against its best match's).
n counts refits.

The real data: the heads of a refit share it (a refit whose outputs are more isotropic raises every head's PR;
its partners set every head's stability), and an anchor head's best match in a pair refit resembles it (the
pair rows of one anchor head share its type).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.harness import Case
from calibration.simulate import clustered_rows
from headstab.sections.effective_rank import rank_correlation_table

N_BOOT = 1000
HEADS = 8
PR_MEAN = 10.0
# (PR, stability) of a head: the refit's share (its scale, its partners) + the head's own.
BETWEEN = np.array([[1.0, -0.05], [-0.05, 0.01]])
WITHIN = np.array([[4.0, -0.12], [-0.12, 0.01]])
# Pair rows: anchor PR = type + u_a + e, match PR = type + u_b + e' (type shared by the anchor head and its match).
TYPE_SD, REFIT_SD, OWN_SD = 2.0, 1.0, 1.0
PAIR_HEADS = 4  # pair rows grow as n^2 heads: fewer heads keep the n = 50 study fast


def _tables(rng: np.random.Generator, n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    values, refit = clustered_rows(rng, n, HEADS, BETWEEN, WITHIN)
    head = np.tile(np.arange(HEADS), n)
    pr = pd.DataFrame(
        {
            "seed": refit,
            "positions": "all",
            "layer": 0,
            "head": head,
            "pr": PR_MEAN + values[:, 0],
            "pr_uncentred": PR_MEAN + values[:, 0],
            "n_tokens": 100,
        }
    )
    stability = pd.DataFrame({"anchor_seed": refit, "layer": 0, "head": head, "stability": 0.5 + values[:, 1]})
    return pr, stability


def _row(statistic: str, pr: pd.DataFrame, stability: pd.DataFrame, matched: pd.DataFrame, seed: int) -> pd.Series:
    table = rank_correlation_table(pr, stability, matched, N_BOOT, seed, 0.95)
    return table[table["statistic"] == statistic].iloc[0]


NO_PAIRS = pd.DataFrame(
    columns=["positions", "anchor_seed", "pair_seed", "layer", "head", "pr_anchor", "pr_match", "similarity"]
)


def _head_rows(statistic: str, truth: float):
    def simulate(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
        row = _row(statistic, *_tables(rng, n), NO_PAIRS, int(rng.integers(2**31)))
        return float(row["ci_low"]), float(row["ci_high"]), truth

    return simulate


def _matched(rng: np.random.Generator, n: int) -> pd.DataFrame:
    kind = rng.normal(scale=TYPE_SD, size=(n, PAIR_HEADS))
    refit = rng.normal(scale=REFIT_SD, size=n)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    rows = []
    for head in range(PAIR_HEADS):
        anchor = PR_MEAN + kind[a, head] + refit[a] + rng.normal(scale=OWN_SD, size=a.size)
        match = PR_MEAN + kind[a, head] + refit[b] + rng.normal(scale=OWN_SD, size=a.size)
        rows.append(
            pd.DataFrame({"anchor_seed": a, "pair_seed": b, "head": head, "pr_anchor": anchor, "pr_match": match})
        )
    return pd.concat(rows, ignore_index=True).assign(positions="all", layer=0, similarity=0.5)


def _pair_rows(rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    pr, stability = _tables(rng, n)
    row = _row("pr_anchor_vs_match", pr, stability, _matched(rng, n), int(rng.integers(2**31)))
    truth = TYPE_SD**2 / (TYPE_SD**2 + REFIT_SD**2 + OWN_SD**2)
    return float(row["ci_low"]), float(row["ci_high"]), truth


POOLED = BETWEEN + WITHIN
CASES = [
    Case(
        "refit_bootstrap_mean_effective_rank",
        "heads_share_their_refit",
        "coverage",
        _head_rows("pr_mean", PR_MEAN),
        quick_reps=150,
    ),
    Case(
        "refit_bootstrap_pearson_effective_rank",
        "heads_share_their_refit",
        "coverage",
        _head_rows("pr_vs_stability", POOLED[0, 1] / np.sqrt(POOLED[0, 0] * POOLED[1, 1])),
        quick_reps=150,
    ),
    Case(
        "refit_bootstrap_pearson_effective_rank",
        "pair_rows_share_the_anchor_head",
        "coverage",
        _pair_rows,
        reps=400,
        quick_reps=100,
    ),
]
