"""Cohen's d_z of paired differences and the rounding below which it is NaN (the tables' effect_size column is
tested through the tables in test_interval_tables.py)."""

from __future__ import annotations

import numpy as np
from helpers.tolerances import reduction_rtol

from headstab.statistics.effect_size import effect_size


def cohen_dz(differences, axis):
    return differences.mean(axis=axis) / differences.std(axis=axis, ddof=1)


def test_effect_size_resolution_is_eps_times_the_largest_magnitude():
    eps = float(np.finfo(np.float32).eps)
    magnitudes = np.full((1, 4), 0.5)
    # n = 4 values within eps x 0.5 of one value: s.d. at most eps x 0.5 x sqrt(4 / 3), the resolution
    at_rounding = 0.25 + eps * 0.5 * np.array([[1.0, -1.0, 1.0, -1.0]])
    assert np.isnan(effect_size(at_rounding, magnitudes, (1,), eps)).all()
    above = 0.25 + 4 * eps * 0.5 * np.array([[1.0, -1.0, 1.0, -1.0]])
    np.testing.assert_allclose(
        effect_size(above, magnitudes, (1,), eps), cohen_dz(above, 1), rtol=reduction_rtol(np.float64, 4)
    )
    assert np.isnan(effect_size(above[:, :1], magnitudes[:, :1], (1,), eps)).all()  # one pair: no s.d.
