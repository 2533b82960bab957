"""Heads and MLP neurons by layer on the same refits: head stability above its null beside the universal-neuron
share, and their rank correlation over (architecture, layer) units pooled by relative depth.

The rank correlation is Spearman's rho of a head measure and a neuron measure over every unit; its p-value
is a layer-label permutation test: the neuron values are permuted among the layers of each architecture
(never across architectures, so an architecture's overall level is kept and only the pairing of a layer's
head value with its own neuron value is broken). Every permutation is enumerated when their number (the
product of each architecture's layers factorial) is at most `n_permutations`, else `n_permutations` are drawn
and p = (1 + #{|rho*| >= |rho|}) / (1 + n_permutations). Two-sided. Method `head_neuron_rank_permutation`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, rankdata

from headstab.statistics.calibration import calibration_label

__all__ = [
    "HEAD_MEASURES",
    "LAYER_COLUMNS",
    "NEURON_MEASURES",
    "RANK_COLUMNS",
    "RANK_METHOD",
    "head_neuron_layer_table",
    "layer_permutations",
    "rank_correlation_table",
    "rank_permutation_test",
]

RANK_METHOD = "head_neuron_rank_permutation"
# Head stability above its null per layer (stability_against_chance), best match and one-to-one.
HEAD_MEASURES = ("above_null", "one_to_one_above_null")
NEURON_MEASURES = ("universal_share", "excess")
_HEAD_COLUMNS = [
    "above_null",
    "above_null_ci_low",
    "above_null_ci_high",
    "one_to_one_above_null",
    "one_to_one_above_null_ci_low",
    "one_to_one_above_null_ci_high",
]
_NEURON_COLUMNS = [
    "universal_share",
    "ci_low",
    "ci_high",
    "null_share",
    "null_ci_low",
    "null_ci_high",
    "excess",
    "excess_ci_low",
    "excess_ci_high",
    "n_refits",
    "calibration",
]
_RENAMED = ("ci_low", "ci_high", "n_refits", "calibration")  # the share table's names, prefixed neuron_ here
LAYER_COLUMNS = ["architecture", "layer", "n_layers", "relative_depth", "n_head_refits", *_HEAD_COLUMNS]
LAYER_COLUMNS += [f"neuron_{name}" if name in _RENAMED else name for name in _NEURON_COLUMNS]
RANK_COLUMNS = [
    "head_measure",
    "neuron_measure",
    "spearman_rho",
    "p_value",
    "q_value",
    "n_units",
    "n_architectures",
    "n_permutations",
    "exact",
    "calibration",
]


def head_neuron_layer_table(chance: pd.DataFrame, shares: Mapping[str, pd.DataFrame], promptset: str) -> pd.DataFrame:
    """LAYER_COLUMNS, one row per (architecture, layer) of every architecture in `shares`: its heads' stability
    above the null (same-layer scope of `promptset`, from summary/tables/stability_against_chance.csv) beside its
    neurons' universal share ({architecture: universal_share_table}). relative_depth = (layer + 1) / n_layers."""
    heads = chance[(chance["promptset"] == promptset) & (chance["scope"] == "same_layer")]
    rows = []
    for arch, share in shares.items():
        own = heads[heads["architecture"] == arch].set_index("layer")
        n_layers = len(share)
        missing = sorted(set(share["layer"]) - set(own.index))
        if missing:
            raise ValueError(
                f"stability_against_chance has no same-layer row of architecture {arch!r}, prompt set {promptset!r}, "
                f"layer(s) {missing}; the head and neuron tables must come from the same run of the same architectures"
            )
        for record in share.to_dict("records"):
            layer = int(record["layer"])
            head = own.loc[layer]
            row = {"architecture": arch, "layer": layer, "n_layers": n_layers, "relative_depth": (layer + 1) / n_layers}
            row["n_head_refits"] = int(head["n_refits"])
            row |= {name: float(head[name]) for name in _HEAD_COLUMNS}
            for name in _NEURON_COLUMNS:
                key = f"neuron_{name}" if name in _RENAMED else name
                row[key] = record[name]
            rows.append(row)
    return pd.DataFrame(rows, columns=LAYER_COLUMNS)


def layer_permutations(groups: Sequence[object], n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """Index permutations [permutation, unit] that permute units only within their group, and whether they are
    every such permutation (exact; the identity among them) or n_permutations random ones."""
    groups = np.asarray(groups)
    members = [np.flatnonzero(groups == group) for group in dict.fromkeys(groups.tolist())]
    total = math.prod(math.factorial(len(indices)) for indices in members)
    if total <= n_permutations:
        out = np.empty((total, len(groups)), dtype=np.int64)
        each = [list(itertools.permutations(indices)) for indices in members]
        for row, choice in enumerate(itertools.product(*each)):
            for indices, permuted in zip(members, choice, strict=True):
                out[row, indices] = permuted
        return out, True
    rng = np.random.default_rng(seed)
    out = np.tile(np.arange(len(groups)), (n_permutations, 1))
    for indices in members:
        out[:, indices] = rng.permuted(np.tile(indices, (n_permutations, 1)), axis=1)
    return out, False


def _unit_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks of values [unit], centred and scaled to unit length: the dot product of two is Spearman's rho."""
    ranks = rankdata(values)
    centred = ranks - ranks.mean()
    return centred / np.linalg.norm(centred)


def rank_permutation_test(
    head: np.ndarray, neuron: np.ndarray, groups: Sequence[object], n_permutations: int, seed: int
) -> dict[str, float | int | bool]:
    """Spearman's rho of head and neuron [unit] (units with a NaN dropped), and its two-sided within-group
    permutation p-value. Returns rho, p_value, n_units, n_permutations (used) and exact; NaN rho and p when
    fewer than 3 units remain or either measure is constant."""
    head, neuron, groups = np.asarray(head, float), np.asarray(neuron, float), np.asarray(groups)
    keep = np.isfinite(head) & np.isfinite(neuron)
    head, neuron, groups = head[keep], neuron[keep], groups[keep]
    empty = {"rho": math.nan, "p_value": math.nan, "n_units": int(keep.sum()), "n_permutations": 0, "exact": False}
    if len(head) < 3 or np.ptp(head) == 0 or np.ptp(neuron) == 0:
        return empty
    x, y = _unit_ranks(head), _unit_ranks(neuron)
    rho = float(x @ y)
    permutations, exact = layer_permutations(groups, n_permutations, seed)
    permuted = y[permutations] @ x  # the ranks of a permuted measure are the permuted ranks
    # Rounding of equal sums in another order must not drop a permutation as extreme as the observed one.
    extreme = int((np.abs(permuted) >= abs(rho) - 1e-12).sum())
    p = extreme / len(permuted) if exact else (1 + extreme) / (1 + len(permuted))
    return {"rho": rho, "p_value": p, "n_units": len(head), "n_permutations": len(permuted), "exact": exact}


def rank_correlation_table(layers: pd.DataFrame, n_permutations: int, seed: int) -> pd.DataFrame:
    """RANK_COLUMNS, one row per head measure x neuron measure over the units of `layers` (LAYER_COLUMNS),
    layer labels permuted within architecture; q_value: Benjamini-Hochberg over the table's rows."""
    rows = []
    for head_measure, neuron_measure in itertools.product(HEAD_MEASURES, NEURON_MEASURES):
        found = rank_permutation_test(
            layers[head_measure].to_numpy(),
            layers[neuron_measure].to_numpy(),
            layers["architecture"],
            n_permutations,
            seed,
        )
        rows.append(
            {
                "head_measure": head_measure,
                "neuron_measure": neuron_measure,
                "spearman_rho": found["rho"],
                "p_value": found["p_value"],
                "n_units": found["n_units"],
                "n_architectures": layers["architecture"].nunique(),
                "n_permutations": found["n_permutations"],
                "exact": found["exact"],
                "calibration": calibration_label(RANK_METHOD, layers["architecture"].nunique()),
            }
        )
    table = pd.DataFrame(rows, columns=RANK_COLUMNS)
    finite = table["p_value"].notna()
    table["q_value"] = np.nan
    if finite.any():
        table.loc[finite, "q_value"] = false_discovery_control(table.loc[finite, "p_value"].to_numpy())
    return table
