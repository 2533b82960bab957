"""Shared by the section tests: a tiny TransformerBridge, layer-stability tables built by hand, and an
in-memory stand-in for an activation-cache reader (headstab.activations.reader)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import bridges


def tiny_bridge(attn_only: bool):
    """2 layers x 4 heads, d_model 32, d_head 8, vocabulary 50, seed 3."""
    return bridges.tiny_bridge(seed=3, attn_only=attn_only)


@pytest.fixture(scope="package")
def bridge():
    return tiny_bridge(attn_only=False)


@pytest.fixture(scope="package")
def attention_only_bridge():
    return tiny_bridge(attn_only=True)


@pytest.fixture
def layer_stability():
    """Factory: {anchor: [mean of layer 0, 1, ...]} -> LAYER_COLUMNS rows (std 0.1)."""

    def make(means_by_anchor, promptset="primary", scope="same_layer"):
        rows = []
        for anchor, means in means_by_anchor.items():
            for layer, m in enumerate(means):
                rows.append((promptset, scope, anchor, layer, m, 0.1))
        return pd.DataFrame(rows, columns=["promptset", "scope", "anchor_seed", "layer", "mean", "std"])

    return make


class FakeCache:
    """One prompt set's hook_z [layer, prompt, pos, head, d_head], residual streams by hook
    ({hook: [layer, prompt, pos, d_model]}), tokens and lengths, read one layer at a time as the reader does."""

    def __init__(self, path, lengths, hook_z=None, resid=None, tokens=None, promptset="primary"):
        self.path, self.promptset = path, promptset
        self._lengths, self._hook_z, self._resid, self._tokens = np.asarray(lengths), hook_z, resid or {}, tokens
        layers = hook_z if hook_z is not None else next(iter(self._resid.values()))
        self.n_layers = len(layers)
        self.reads = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def _check(self, promptset):
        if promptset != self.promptset:
            raise KeyError(promptset)

    def lengths(self, promptset):
        self._check(promptset)
        return self._lengths

    def tokens(self, promptset):
        self._check(promptset)
        return self._tokens

    def hook_z(self, promptset, layer=None, prompts=None):
        self._check(promptset)
        self.reads.append(("hook_z", layer))
        return self._hook_z if layer is None else self._hook_z[layer]

    def resid(self, promptset, hook, layer=None, prompts=None):
        self._check(promptset)
        self.reads.append((hook, layer))
        return self._resid[hook] if layer is None else self._resid[hook][layer]


@pytest.fixture
def fake_cache():
    """The FakeCache class: FakeCache(path, lengths, hook_z=..., resid={hook: ...}, tokens=...)."""
    return FakeCache
