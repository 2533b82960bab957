"""Head-type figures: drawn at the demo's size for 2-12 layers, every name inside the canvas (conftest's check)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from headstab.head_types import HEAD_TYPES
from headstab.plots.head_types import plot_head_types, plot_type_share_by_depth
from headstab.sections.head_types import universality_table

SEEDS, N_HEADS = [1, 2, 3, 4], 8


def universality(n_layers: int, rule: str = "fixed") -> pd.DataFrame:
    rng = np.random.default_rng(n_layers)
    labels = rng.choice(["previous_token", "bos", "none", "induction+duplicate_token"], size=(4, n_layers, N_HEADS))
    grid = np.indices(labels.shape).reshape(3, -1).T
    types = pd.DataFrame({"refit": np.asarray(SEEDS)[grid[:, 0]], "layer": grid[:, 1], "head": grid[:, 2],
                          "type": labels.ravel(), "threshold_rule": rule})  # fmt: skip
    pairs = pd.DataFrame(
        [(SEEDS[a], SEEDS[b], layer, head, rng.integers(N_HEADS), rng.random(), rng.integers(N_HEADS), rng.random())
         for a, b in itertools.permutations(range(4), 2) for layer in range(n_layers) for head in range(N_HEADS)],
        columns=["anchor_seed", "pair_seed", "layer", "head", "best_head", "similarity", "assigned_head",
                 "assigned_similarity"],
    )  # fmt: skip
    heads = types[["refit", "layer", "head"]].rename(columns={"refit": "anchor_seed"})
    columns = ("above_null", "one_to_one_above_null")
    heads = heads.assign(**{column: rng.random(len(heads)) for column in columns})
    return universality_table(types, pairs, heads, SEEDS, n_boot=50, seed=0, confidence=0.95)


def pooled(n_layers: int) -> pd.DataFrame:
    layers = np.arange(n_layers)
    return pd.DataFrame({"scope": "same_layer", "layer": layers, "stability": 0.8 - 0.02 * layers,
                         "ci_low": 0.7, "ci_high": 0.9, "stability_one_to_one": 0.6 - 0.02 * layers,
                         "one_to_one_ci_low": 0.5, "one_to_one_ci_high": 0.7})  # fmt: skip


@pytest.mark.parametrize("n_layers", (2, 12))  # the fewest and the most layers: labels crowd as layers grow
def test_the_head_type_figure_draws_every_type_and_both_matchings(n_layers, tmp_path):
    drawn = plot_head_types(universality(n_layers), pooled(n_layers), tmp_path / "types.png", f"l{n_layers}_h8_attn_wd")
    assert set(drawn["type"]) == set(HEAD_TYPES) and len(drawn) == len(HEAD_TYPES) * 4 * n_layers
    assert "strong_universality_best_match" not in set(drawn["statistic"])  # drawn above chance only
    assert (tmp_path / "types.png").stat().st_size > 0


def test_type_share_by_depth_draws_one_line_per_architecture_and_a_row_per_threshold_rule(tmp_path):
    summary = pd.concat(
        [universality(n, "held_out_step0" if suffix else "fixed").assign(architecture=f"l{n}_h8{suffix}")
         for n in (2, 4, 8, 12) for suffix in ("", "_attn_wd")],
        ignore_index=True,
    )  # fmt: skip
    drawn = plot_type_share_by_depth(summary, tmp_path / "depth.png")
    assert drawn["architecture"].nunique() == 8 and (drawn["statistic"] == "head_share").all()
    assert set(drawn["threshold_rule"]) == {"fixed", "held_out_step0"}
    one_rule = plot_type_share_by_depth(summary[summary["threshold_rule"] == "fixed"], tmp_path / "fixed.png")
    assert one_rule["architecture"].nunique() == 4
