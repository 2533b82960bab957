"""Exact binomial statistics of shares of refits: Clopper-Pearson intervals by hand, NaN with one refit, the exact
paired (McNemar) test's p-values by hand, and its smallest p at n pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headstab.statistics.binomial import paired_exact_test, share_interval, smallest_paired_p

# Clopper-Pearson by hand: at k = n the lower end is (alpha / 2)^(1 / n); at k = 0 the upper end is 1 - that.
CP_4_OF_4_LOW = 0.025 ** (1 / 4)  # 0.3976
CP_6_OF_6_LOW_90 = 0.05 ** (1 / 6)


def test_clopper_pearson_at_the_boundaries_by_hand():
    assert share_interval(4, 4, 0.95) == pytest.approx((1.0, CP_4_OF_4_LOW, 1.0), abs=1e-12)
    assert CP_4_OF_4_LOW == pytest.approx(0.3976, abs=1e-4)
    assert share_interval(0, 4, 0.95) == pytest.approx((0.0, 0.0, 1 - CP_4_OF_4_LOW), abs=1e-12)
    assert share_interval(6, 6, 0.90) == pytest.approx((1.0, CP_6_OF_6_LOW_90, 1.0), abs=1e-12)


def test_clopper_pearson_inside_by_its_beta_quantiles():
    from scipy.stats import beta

    share, low, high = share_interval(3, 10, 0.95)
    assert share == 0.3
    assert low == pytest.approx(beta.ppf(0.025, 3, 8), abs=1e-10)
    assert high == pytest.approx(beta.ppf(0.975, 4, 7), abs=1e-10)
    # the 4-of-4 and 0-of-4 intervals overlap: neither is a test of the other
    assert share_interval(0, 4, 0.95)[2] > share_interval(4, 4, 0.95)[1]


def test_one_refit_gives_no_interval_and_none_no_share():
    share, low, high = share_interval(1, 1, 0.95)
    assert share == 1.0 and np.isnan(low) and np.isnan(high)
    assert share_interval(0, 1, 0.95)[0] == 0.0
    assert all(np.isnan(share_interval(0, 0, 0.95)))
    share, low, high = share_interval(1, 2, 0.95)  # two refits: an interval, not zero width
    assert share == 0.5 and low < 0.5 < high


@pytest.mark.parametrize("k, n", [(-1, 4), (5, 4)])
def test_a_share_outside_zero_to_n_is_refused(k, n):
    with pytest.raises(ValueError, match=f"k = {k} of n = {n}"):
        share_interval(k, n, 0.95)


def test_the_exact_paired_test_by_hand():
    assert paired_exact_test(4, 0) == 0.0625  # 4 of 4 trained, 0 of 4 at step 0
    assert paired_exact_test(6, 0) == 1 / 64
    assert paired_exact_test(3, 1) == pytest.approx(5 / 16, abs=1e-15)  # P(X >= 3), X ~ Bin(4, 1/2)
    assert paired_exact_test(0, 3) == 1.0
    assert paired_exact_test(1, 3) == pytest.approx(15 / 16, abs=1e-15)
    assert paired_exact_test(0, 0) == 1.0  # no refit changed: no evidence
    assert paired_exact_test(2, 2) == pytest.approx(11 / 16, abs=1e-15)  # as many gained as lost: still a test


def test_the_paired_test_refuses_negative_counts():
    with pytest.raises(ValueError, match="gained -1, lost 0"):
        paired_exact_test(-1, 0)
    with pytest.raises(ValueError, match="gained 0, lost -2"):
        paired_exact_test(0, -2)


def test_the_smallest_p_is_every_pair_gained():
    assert smallest_paired_p(4) == 1 / 16 and smallest_paired_p(5) == 1 / 32
    for n in (1, 4, 5, 12):
        assert smallest_paired_p(n) == paired_exact_test(n, 0)
    assert min(n for n in range(1, 10) if smallest_paired_p(n) <= 0.05) == 5
    assert math.isclose(smallest_paired_p(4.0), 0.0625)
