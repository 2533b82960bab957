"""The p-values and intervals of the MLP-neuron tables (headstab.neurons): `Method` fields (name, reports,
unit, min_n, statistic), which `headstab.statistics.calibration` makes into METHODS entries (plain tuples, so
this module imports nothing and either module may be imported first)."""

from __future__ import annotations

__all__ = ["NEURON_METHODS"]

NEURON_METHODS: tuple[tuple[str, str, str, int | None, str], ...] = (
    ("neuron_share_bootstrap", "interval", "refits", None, "share of universal neurons, its null and excess"),
    # calibration/cases/head_neurons.py: n architectures of 6 layers.
    (
        "head_neuron_rank_permutation",
        "p_value",
        "architectures",
        None,
        "Spearman rank correlation over layers of head stability above null and universal-neuron share",
    ),
    # calibration/cases/neuron_depth.py: 4 layers, no dip, layers of two kinds and refit-specific offsets.
    (
        "neuron_mid_depth_sign_flip",
        "p_value",
        "refits",
        4,
        "end layers minus interior layers of the neurons' excess correlation, one-sided sign flip over refits' "
        "jackknife pseudo-values (neuron_depth_tests.csv)",
    ),
)
