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


def test_two_tokens_are_enough_and_one_is_not(tmp_path):
    # A covariance needs 2 tokens: the boundary itself loads.
    save_pair_statistics(some_statistics("same_layer", 2), tmp_path / "two.npz")
    assert load_pair_statistics(tmp_path / "two.npz", expected_tokens=2).n_tokens == 2
    save_pair_statistics(some_statistics("same_layer", 1), tmp_path / "one.npz")
    with pytest.raises(ValueError, match=r"one.npz .*: 1 token\(s\) streamed; delete it and stream the token budget"):
        load_pair_statistics(tmp_path / "one.npz")


def test_the_messages_name_the_fix_in_full(tmp_path):
    save_pair_statistics(some_statistics("same_layer", 40), tmp_path / "pair.npz")
    with pytest.raises(
        ValueError, match="budget is 50; a stream stopped early or the budget changed: delete the file "
    ):
        load_pair_statistics(tmp_path / "pair.npz", expected_tokens=50)
    with pytest.raises(ValueError, match="budget changed: delete the file and stream it again$"):
        load_pair_statistics(tmp_path / "pair.npz", expected_tokens=50)
    np.savez(tmp_path / "old.npz", format="headstab-neuron-statistics-0")
    with pytest.raises(
        ValueError, match="statistics file of this version: delete it and let the workflow stream it again$"
    ):
        load_pair_statistics(tmp_path / "old.npz")


def test_an_unknown_scope_names_the_file_and_the_known_scopes(tmp_path):
    stats = some_statistics("same_layer")
    stats.scope = "all_layers"
    save_pair_statistics(stats, tmp_path / "pair.npz")
    with pytest.raises(ValueError, match=r"^\S*pair.npz: scope 'all_layers' is not one of same_layer, cross_layer$"):
        load_pair_statistics(tmp_path / "pair.npz")


def test_loads_onto_the_device_asked_for(tmp_path):
    save_pair_statistics(some_statistics("same_layer"), tmp_path / "pair.npz")
    loaded = load_pair_statistics(tmp_path / "pair.npz", device="meta")
    assert {
        getattr(loaded, name).device.type for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")
    } == {"meta"}


def test_a_file_holding_pickled_objects_is_refused_unread(tmp_path):
    # Unpickling a downloaded or shared file can run code: an object array must stop the load.
    stats = some_statistics("same_layer")
    arrays = {name: getattr(stats, name).numpy() for name in ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")}
    labels = dict(anchor="seed1", other="seed2", n_tokens=40, scope=np.array("same_layer", dtype=object))
    np.savez(tmp_path / "pickled.npz", format=NEURON_STATISTICS_FORMAT, **labels, **arrays)
    with pytest.raises(ValueError, match=r"pickled\.npz: holds pickled objects, which are never loaded") as error:
        load_pair_statistics(tmp_path / "pickled.npz")
    assert str(error.value).endswith("delete it and let the workflow stream it again")
    assert "allow_pickle=False" in str(error.value.__cause__)  # numpy refused it unread
