"""Adam vs AdamW (paper §4.5) as tests: the per-layer stability difference with its bootstrap interval
and a permutation test over refits, and the perplexity parity as an equivalence test (TOST)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstab.inference.bootstrap import draw_resamples, percentile_interval, stability_replicates
from headstab.inference.hypothesis import permutation_test, tost

__all__ = ["OPTIMIZER_TEST_COLUMNS", "optimizer_tests"]

OPTIMIZER_TEST_COLUMNS = [
    "statistic",
    "layer",
    "adam",
    "adamw",
    "difference",
    "ci_low",
    "ci_high",
    "confidence",
    "test",
    "p_value",
    "equivalent",
    "margin",
    "n_adam",
    "n_adamw",
    "n_resamples",
]


def optimizer_tests(
    adam,
    adamw,
    ppl_adam: np.ndarray,
    ppl_adamw: np.ndarray,
    *,
    n_boot: int,
    permutations: int,
    seed: int,
    confidence: float,
    perplexity_margin: float,
) -> pd.DataFrame:
    """OPTIMIZER_TEST_COLUMNS for one Adam/AdamW pair.

    adam, adamw: `GroupedSimilarity` of each member (primary prompts). Rows:
    - statistic "layer_stability" per layer: pooled same-layer stability of each member, difference
      AdamW - Adam with the percentile interval of independent multi-bootstraps of the two members,
      and the permutation test (test "permutation") of the difference in mean per-anchor layer
      stability, permuting the optimizer labels of the refits;
    - statistic "perplexity" (layer -1): validation perplexities, difference AdamW - Adam with its
      (1 - 2 alpha) Welch interval, alpha = 1 - confidence, and the TOST p-value of equivalence within
      +-perplexity_margin x the Adam mean (test "tost"; equivalent when p < alpha).
    """
    members = []
    for offset, grouped in enumerate((adam, adamw)):
        resamples = draw_resamples(n_boot, len(grouped.seeds), len(grouped.group_sizes), seed + offset)
        members.append(stability_replicates(resamples, grouped.observed, grouped.group_sizes))
    low, high = percentile_interval(members[1]["layer"] - members[0]["layer"], confidence)
    per_anchor = [member["head_estimate"].mean(axis=-1) for member in members]  # [anchor, layer]
    permuted = permutation_test(per_anchor[0], per_anchor[1], permutations, seed)
    rows = [
        (
            "layer_stability",
            layer,
            members[0]["layer_estimate"][layer],
            members[1]["layer_estimate"][layer],
            members[1]["layer_estimate"][layer] - members[0]["layer_estimate"][layer],
            low[layer],
            high[layer],
            confidence,
            "permutation",
            permuted["p_value"][layer],
            None,
            np.nan,
            len(adam.seeds),
            len(adamw.seeds),
            n_boot,
        )  # fmt: skip
        for layer in range(len(low))
    ]
    ppl_adam, ppl_adamw = np.asarray(ppl_adam, dtype=float), np.asarray(ppl_adamw, dtype=float)
    margin = perplexity_margin * float(ppl_adam.mean())
    equivalence = tost(ppl_adam, ppl_adamw, margin, alpha=1.0 - confidence)
    rows.append(
        (
            "perplexity",
            -1,
            ppl_adam.mean(),
            ppl_adamw.mean(),
            equivalence["difference"],
            equivalence["ci_low"],
            equivalence["ci_high"],
            1.0 - 2 * (1.0 - confidence),
            "tost",
            equivalence["p_value"],
            bool(equivalence["equivalent"]),
            margin,
            len(ppl_adam),
            len(ppl_adamw),
            0,
        )  # fmt: skip
    )
    return pd.DataFrame(rows, columns=OPTIMIZER_TEST_COLUMNS)
