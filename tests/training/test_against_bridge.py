"""The plain training model against the TransformerBridge loop it replaces (tests/helpers/bridge_training.py):
after 100 steps their weights differ by no more than two bridge runs whose initial weights differ by one ulp.

Training is chaotic: any rounding difference (here, the order of a few float32 sums) grows over the steps as a
one-ulp change of the initial weights does, and a real change of the recipe lands orders of magnitude further
away (the control: the bridge with its lr raised by 0.1%). b_K is left out: its true gradient is zero (a key
bias adds the same score to every key), so Adam steps it on rounding noise alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers.bridge_training import bridge_training_run

from headstab.training import train_refit

from .conftest import final_state, quiet, write_shards

STEPS = 100
# Seen over 6 seeds and options: plain-vs-bridge / one-ulp spread from 0.5 to 2.2; the lr control 30x to 10,000x.
SPREAD_FACTOR = 4


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Euclidean distance over every trained tensor but the key biases (float64 sums)."""
    kept = [name for name in a if not name.endswith("attn.k.bias") and name != "unembed.bias"]
    return float(sum(((a[name].double() - b[name].double()) ** 2).sum() for name in kept) ** 0.5)


@pytest.mark.parametrize("options", [{}, {"optimizer": "adamw", "weight_decay": 0.1}], ids=["adam", "adamw"])
def test_the_plain_loop_lands_within_the_one_ulp_spread_of_the_bridge_loop(tiny_spec, tmp_path, options):
    rng = np.random.default_rng(0)  # random tokens: no structure that would pull every run to one solution
    shards = write_shards(tmp_path, [rng.integers(0, 32, 2000), rng.integers(0, 32, 1000)])
    spec = tiny_spec(n_tokens=STEPS * 4 * 16, epochs=4, checkpoint_every=STEPS, log_every=STEPS, **options)
    train_refit(spec, 1, shards, tmp_path / "plain", quiet())
    plain = final_state(tmp_path / "plain")
    bridge = bridge_training_run(spec, 1, shards, STEPS)
    up, down = (bridge_training_run(spec, 1, shards, STEPS, ulp_nudge=sign * float("inf")) for sign in (1, -1))
    spread = max(distance(up, bridge), distance(down, bridge), distance(up, down))
    assert 0 < distance(plain, bridge) <= SPREAD_FACTOR * spread, (distance(plain, bridge), spread)
    control = bridge_training_run(dataclasses.replace(spec, lr=spec.lr * 1.001), 1, shards, STEPS)
    assert distance(control, bridge) > 10 * SPREAD_FACTOR * spread
