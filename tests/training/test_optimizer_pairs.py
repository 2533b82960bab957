"""The two members of an optimizer pair (Adam, AdamW) are a paired design: refit s of both starts from the same
weights on the same data order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from headstab.plan.config import architecture_spec, load_config
from headstab.plan.spec import paired_by_seed
from headstab.refits.models import build_model
from headstab.training.options import RefitTarget, TrainingData
from headstab.training.refit import open_corpus, prepare_refit

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("config", ["config.yaml", "demo.yaml"])
def test_every_wd_member_of_the_configs_is_paired_with_its_adam_member(config):
    configuration = load_config(REPO / "config" / config)
    names = [name for name in configuration["architectures"] if name.endswith("_wd")]
    assert names, f"config/{config} has no AdamW members"
    for name in names:
        adam, adamw = architecture_spec(configuration, name[: -len("_wd")]), architecture_spec(configuration, name)
        assert (adam.optimizer, adamw.optimizer) == ("adam", "adamw") and paired_by_seed(adam, adamw), name


def test_pair_members_start_from_bit_identical_weights_and_other_seeds_do_not():
    configuration = load_config(REPO / "config" / "demo.yaml")
    adam, adamw = architecture_spec(configuration, "l2_h8_attn"), architecture_spec(configuration, "l2_h8_attn_wd")
    for seed in (1, 3):
        first, second = build_model(adam, seed).state_dict(), build_model(adamw, seed).state_dict()
        assert first.keys() == second.keys()
        assert all(torch.equal(first[key], second[key]) for key in first), seed
    other = build_model(adamw, 2).state_dict()
    assert not torch.equal(first["blocks.0.attn.q.weight"], other["blocks.0.attn.q.weight"])


def test_pair_members_see_the_same_data_order_for_the_same_seed(tiny_spec, cyclic_shards, tmp_path):
    adam = tiny_spec(name="tiny", optimizer="adam", weight_decay=0.0)
    adamw = dataclasses.replace(adam, name="tiny_wd", optimizer="adamw", weight_decay=0.1)
    assert paired_by_seed(adam, adamw)
    data = TrainingData.of(cyclic_shards)

    def prepared(spec, seed, name):
        corpus = open_corpus(spec, data)
        return corpus, prepare_refit(spec, corpus, RefitTarget(seed, tmp_path / name), "fp32")

    for seed in (1, 2):
        (corpus_a, first), (corpus_w, second) = prepared(adam, seed, f"a{seed}"), prepared(adamw, seed, f"w{seed}")
        assert corpus_a.steps == corpus_w.steps and np.array_equal(first.order, second.order)
    assert not np.array_equal(first.order, prepared(adam, 1, "x")[1].order)


def test_pair_members_that_differ_in_init_or_data_are_not_paired(tiny_spec):
    adam = tiny_spec(name="tiny", optimizer="adam", weight_decay=0.0)
    adamw = dataclasses.replace(adam, name="tiny_wd", optimizer="adamw", weight_decay=0.1)
    for change in ({"d_model": 32}, {"corpus": "other"}, {"seq_len": 8}, {"seeds": (1, 2, 4)}, {"n_tokens": 64}):
        assert not paired_by_seed(adam, dataclasses.replace(adamw, **change)), change
    assert paired_by_seed(adam, dataclasses.replace(adamw, lr=1e-4, log_every=7))  # the recipe, not the start or data
