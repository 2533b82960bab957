"""The negative control of the layer tests (§4.1, §4.6) and of the meta-SNE Mantel test (§4.9): refits whose layers are
exchangeable by construction (random attention-only heads that write nothing, tests/helpers/exchangeable_refits.py),
through the published-refit path (TL2 state dict -> conversion -> the cache writer -> prompt-group similarity) and
the functions the rules call. No layer differs, so every test must reject at about its level over repeated
fixtures (the Mantel test on two architectures of 4 refits, so that its exact p can go below the level), and the
head-shuffle test the workflow used before must be seen to reject far more often."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import TINY_ARCHITECTURE
from helpers.exchangeable_refits import exchangeable_fixture, silent_spec

from headstab.sections.meta_sne import depth_mantel_table, describe_refits
from headstab.sections.stability_gap import layer_pseudo_values, layer_tests_table

SEEDS = tuple(range(1, 9))
N_FIXTURES = 80
ALPHA = 0.05
# A test of level 0.05 rejects in 12 or more of 80 independent fixtures with probability 0.0006 (binomial tail):
# with four tests, a valid one fails this bound in fewer than 1 of 400 fixture sets.
MAX_REJECTIONS = 11
# The old test must reject in at least 30 of 80: a level-0.05 test does so with probability 7e-19.
OLD_MIN_REJECTIONS = 30
PERMUTATIONS = 999
# The Mantel test sees the 8 refits as two architectures of 4 (the same exchangeable spec): with one 4-layer
# architecture its exact p cannot go below 2/4! = 0.083 and the probe would be vacuous; with two, 2/(4!)^2 = 0.0035.
MANTEL_ARCHITECTURES = ("l4_h4_attn", "l4_h4_attn_b")


def _head_shuffle_p(grouped, seed: int) -> float:
    """The layer-label test the workflow used before: each anchor's head stabilities shuffled over its layers'
    slots independently, anchors pooled, the range of the pooled layer means against the observed range."""
    best = grouped.mean("observed").max(axis=-1)  # [anchor, partner, layer, head]
    n, n_layers, n_heads = best.shape[0], best.shape[2], best.shape[3]
    head = np.einsum("ab,abli->ali", 1.0 - np.eye(n), best) / (n - 1)
    flat = head.reshape(n, -1)
    order = np.argsort(np.random.default_rng(seed).random((PERMUTATIONS, n, flat.shape[1])), axis=-1)
    shuffled = np.take_along_axis(np.broadcast_to(flat, order.shape), order, axis=-1)
    permuted = np.ptp(shuffled.reshape(PERMUTATIONS, n, n_layers, n_heads).mean(axis=(1, 3)), axis=1)
    return float((1 + np.sum(permuted >= np.ptp(head.mean(axis=(0, 2))))) / (1 + PERMUTATIONS))


@pytest.fixture(scope="module")
def p_values(tmp_path_factory) -> pd.DataFrame:
    """p of every test on N_FIXTURES fixtures of 8 refits (4 layers x 4 heads each)."""
    import torch

    from headstab.refits.models import build_model

    spec = silent_spec(TINY_ARCHITECTURE)
    model = build_model(spec, seed=0, legacy_gpt2_init=False).eval()
    arch_facts = {"n_layers": 4, "n_heads": 4, "optimizer": "Adam", "attention_only": True}
    facts = {spec.name: arch_facts}
    mantel_facts = {name: arch_facts for name in MANTEL_ARCHITECTURES}
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for draw in range(N_FIXTURES):
            fixture = exchangeable_fixture(model, spec, SEEDS, draw, tmp_path_factory.mktemp(f"draw{draw}"))
            pseudo = {spec.name: layer_pseudo_values(fixture["grouped"])}
            tests = layer_tests_table(pseudo, facts, 10000, draw).set_index(["statistic", "test"])
            refits = {
                (MANTEL_ARCHITECTURES[i * 2 // len(SEEDS)], s): p
                for i, (s, p) in enumerate(zip(SEEDS, fixture["caches"]))
            }
            descriptions = describe_refits(refits, "primary")
            mantel = depth_mantel_table(descriptions, mantel_facts, PERMUTATIONS, draw).set_index("description")
            rows.append(
                {
                    "layers_differ": tests.loc[("layer_above_null", "layers_differ"), "p_value"],
                    "mid_depth_dip": tests.loc[("layer_above_null", "mid_depth_dip"), "p_value"],
                    "mantel": mantel.loc["raw", "p_value"],
                    "mantel_normalised": mantel.loc["scale_normalised", "p_value"],
                    "mantel_note": mantel.loc["raw", "note"],
                    "mantel_architectures": mantel.loc["raw", "n_architectures"],
                    "head_shuffle": _head_shuffle_p(fixture["grouped"], draw),
                }
            )
    finally:
        torch.set_num_threads(threads)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("test", ["layers_differ", "mid_depth_dip", "mantel", "mantel_normalised"])
def test_the_layer_mid_depth_and_mantel_tests_reject_exchangeable_layers_at_about_their_level(p_values, test):
    p = p_values[test]
    assert p.notna().all() and p.between(0, 1).all()
    assert (p <= ALPHA).sum() <= MAX_REJECTIONS, p.round(4).tolist()


def test_the_mantel_probe_can_reject(p_values):
    """Its exact floor is below the level, so "no more rejections than a level-0.05 test" has content."""
    assert (p_values["mantel_architectures"] == 2).all()
    floors = p_values["mantel_note"].str.extract(r"exact over (\d+) layer orders, so p >= ([0-9.e-]+)")
    assert (floors[0].astype(int) == 24**2).all(), p_values["mantel_note"].iloc[0]
    assert (floors[1].astype(float) < ALPHA).all()


def test_the_head_shuffle_test_rejects_exchangeable_layers_far_more_often(p_values):
    rejections = int((p_values["head_shuffle"] <= ALPHA).sum())
    assert rejections >= OLD_MIN_REJECTIONS, p_values["head_shuffle"].round(4).tolist()
    assert rejections > 3 * (p_values["layers_differ"] <= ALPHA).sum()
