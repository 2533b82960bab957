"""Exact binomial statistics of shares of refits: Clopper-Pearson intervals and the exact paired test.

A share of refits (the refits with a head of some type in a layer) is k successes in n independent refits,
so its interval is the exact binomial one (Clopper-Pearson, `scipy.stats.binomtest(k, n).proportion_ci`),
which covers at least its level at every n and every true share; a percentile bootstrap of the same share
collapses to zero width at 0 of n and n of n. With one refit a share says nothing about its spread, and the
interval is NaN.

The same refits typed before and after training are a paired design: the exact McNemar test conditions on
the discordant refits (the type gained, d_gained, or lost, d_lost, in training) and asks whether gains
outnumber losses, a one-sided binomial test of d_gained of d_gained + d_lost at 1/2. Its smallest p at n
pairs is 2^-n (every refit gained the type), so no n below 5 can reach 5%.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binomtest

__all__ = ["paired_exact_test", "share_interval", "smallest_paired_p"]


def share_interval(k: int, n: int, confidence: float) -> tuple[float, float, float]:
    """(k / n, low, high): the share and its Clopper-Pearson interval at `confidence`.

    The interval is NaN when n < 2; the share too when n is 0. Raises ValueError unless 0 <= k <= n.
    """
    if not 0 <= k <= n:
        raise ValueError(f"a share needs 0 <= k <= n; got k = {k} of n = {n}")
    if n < 2:
        return (float(k) if n else np.nan), np.nan, np.nan
    interval = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return k / n, float(interval.low), float(interval.high)


def paired_exact_test(gained: int, lost: int) -> float:
    """One-sided exact McNemar p-value that training adds what it is tested for.

    gained: pairs with it after training and not before; lost: pairs with it before and not after. The
    p-value is P(X >= gained) for X ~ Binomial(gained + lost, 1/2); 1.0 with no discordant pair.
    """
    if gained < 0 or lost < 0:
        raise ValueError(f"discordant pair counts must be >= 0; got gained {gained}, lost {lost}")
    if gained + lost == 0:
        return 1.0
    return float(binomtest(int(gained), int(gained + lost), alternative="greater").pvalue)  # p = 1/2 is the default


def smallest_paired_p(n: int) -> float:
    """The smallest p-value `paired_exact_test` can give with n pairs: 2^-n (every pair gained)."""
    return 0.5 ** int(n)
