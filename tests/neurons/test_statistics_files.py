"""Neuron statistics files: a saved accumulator loads back bit for bit, and a short, damaged or foreign file
stops naming the file and the fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headstab.neurons.statistics_files import NEURON_STATISTICS_FORMAT, load_pair_statistics, save_pair_statistics
from headstab.neurons.streamed import PairStatistics


def some_statistics(scope: str, n_tokens: int = 40) -> PairStatistics:
    rng = np.random.default_rng(0)
    stats = PairStatistics.empty("seed1", "seed2", 2, 3, scope)
    stats.update(rng.normal(size=(n_tokens, 2, 3)), rng.normal(size=(n_tokens, 2, 3)))
    return stats


@pytest.mark.parametrize("scope", ["same_layer", "cross_layer"])
def test_saved_statistics_load_back_bit_for_bit(tmp_path, scope):
    stats = some_statistics(scope)
    save_pair_statistics(stats, tmp_path / "pair.npz")
    loaded = load_pair_statistics(tmp_path / "pair.npz", expected_tokens=40)
    assert (loaded.anchor, loaded.other, loaded.scope, loaded.n_tokens) == ("seed1", "seed2", scope, 40)
    for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross"):
        assert torch.equal(getattr(loaded, name), getattr(stats, name))


def test_a_stream_shorter_than_the_token_budget_names_the_file_and_the_fix(tmp_path):
    save_pair_statistics(some_statistics("same_layer", 40), tmp_path / "pair.npz")
    with pytest.raises(ValueError, match=r"pair.npz \(refit 'seed1' against 'seed2'\): 40 tokens streamed, but the "):
        load_pair_statistics(tmp_path / "pair.npz", expected_tokens=50)
    save_pair_statistics(PairStatistics.empty("seed1", "seed2", 2, 3, "same_layer"), tmp_path / "empty.npz")
    with pytest.raises(ValueError, match=r"empty.npz .*: 0 token\(s\) streamed; delete it and stream"):
        load_pair_statistics(tmp_path / "empty.npz")


def test_a_damaged_or_foreign_file_names_the_file(tmp_path):
    stats = some_statistics("cross_layer")
    arrays = {name: getattr(stats, name).numpy() for name in ("mean_a", "mean_b", "comoment_a", "comoment_b")}
    labels = dict(anchor="seed1", other="seed2", scope="cross_layer", n_tokens=40)
    np.savez(tmp_path / "cut.npz", format=NEURON_STATISTICS_FORMAT, cross=np.zeros((2, 3, 3)), **labels, **arrays)
    with pytest.raises(ValueError, match=r"cut.npz: cross has shape \(2, 3, 3\), not \(6, 6\) .*delete it"):
        load_pair_statistics(tmp_path / "cut.npz")
    np.savez(tmp_path / "other.npz", cross=np.zeros(3))
    with pytest.raises(ValueError, match="other.npz: format None, not 'headstab-neuron-statistics-1'"):
        load_pair_statistics(tmp_path / "other.npz")
