"""headstab.plan.seed_design: a grid refit's init seed draws its weights and its data seed orders its windows."""

import re

import numpy as np
import pytest
import torch

from headstab.plan.seed_design import (
    BLOCK_WILDCARD,
    SEED_WILDCARD,
    SHARED_DATA_SEED,
    block_name,
    grid_refits,
    refit_name,
    refit_seeds,
    train_blocks,
    training_seeds,
    ulp_perturbed,
    unperturbed,
)
from headstab.refits.models import build_model
from headstab.training.data import window_order


def weights(spec, refit):
    init_seed, _ = refit_seeds(refit)
    return torch.cat([p.detach().flatten() for p in build_model(spec, init_seed).parameters()])


def order(refit, n_windows=64):
    _, data_seed = refit_seeds(refit)
    return window_order(n_windows, data_seed, n_windows)


def test_grid_refits_are_init_major_and_a_plain_seed_is_its_own_pair():
    assert grid_refits([1, 2], [3, 4]) == ("1-3", "1-4", "2-3", "2-4")
    assert refit_seeds(7) == refit_seeds("7") == refit_seeds("7-7") == (7, 7)
    assert refit_name("7") == 7 and refit_name("1-2") == "1-2"
    with pytest.raises(ValueError, match="neither a seed"):
        refit_seeds("1-x")


def test_the_data_seed_changes_the_window_order_and_the_init_seed_does_not():
    assert np.array_equal(order("1-1"), order("2-1"))
    assert not np.array_equal(order("1-1"), order("1-2"))
    assert sorted(order("1-2")) == list(range(64))  # still a permutation of every window


def test_the_init_seed_changes_the_weights_and_the_data_seed_does_not(tiny_spec):
    spec = tiny_spec()
    assert torch.equal(weights(spec, "1-1"), weights(spec, "1-2"))
    assert not torch.equal(weights(spec, "1-1"), weights(spec, "2-1"))
    assert torch.equal(weights(spec, "3-3"), weights(spec, 3))  # the diagonal is the paper refit


def test_a_shared_data_order_gives_every_refit_the_one_fixed_data_seed():
    assert training_seeds(3, "per_seed") == training_seeds("3", "per_seed") == (3, 3)
    assert training_seeds("1-2", "per_seed") == (1, 2)
    assert training_seeds(3, "shared") == (3, SHARED_DATA_SEED) and training_seeds(4, "shared")[1] == SHARED_DATA_SEED
    with pytest.raises(ValueError, match="seed grid"):
        training_seeds("1-2", "shared")
    with pytest.raises(ValueError, match="per_seed or shared"):
        training_seeds(3, "shuffled")


def test_a_cells_one_ulp_twin_has_its_seeds_and_its_own_name():
    assert grid_refits([1, 2], [3, 4], ulp_twins=["2-3", "1-3"]) == ("1-3", "1-4", "2-3", "2-4", "1-3-ulp", "2-3-ulp")
    assert refit_seeds("2-3-ulp") == (2, 3) and refit_name("2-3-ulp") == "2-3-ulp" and refit_name("2-3") == "2-3"
    assert ulp_perturbed("2-3-ulp") and not ulp_perturbed("2-3") and not ulp_perturbed(7)
    assert unperturbed("2-3-ulp") == "2-3" and unperturbed(7) == 7
    for name in ("7", "2-3", "2-3-ulp"):
        assert re.fullmatch(SEED_WILDCARD, name)
    assert not re.fullmatch(SEED_WILDCARD, "7-ulp")
    # a twin trains in a block beside its cell
    assert train_blocks(["1-1", "1-1-ulp"], 4) == {"seeds1-1_1-1-ulp": ["1-1", "1-1-ulp"]}
    assert re.fullmatch(BLOCK_WILDCARD, "seeds1-1_1-1-ulp") and not re.fullmatch(BLOCK_WILDCARD, "seeds1-ulp")


def test_a_one_ulp_twin_trains_with_its_cells_seeds_and_cannot_share_a_data_order():
    assert training_seeds("2-3-ulp", "per_seed") == training_seeds("2-3", "per_seed") == (2, 3)
    with pytest.raises(ValueError, match="seed grid"):
        training_seeds("2-3-ulp", "shared")
    with pytest.raises(ValueError, match="one-ulp twin"):
        refit_seeds("7-ulp")


def test_a_twin_of_a_cell_outside_the_grid_is_refused():
    with pytest.raises(ValueError, match=r"ulp_twins \['5-5'\] are not cells of the grid"):
        grid_refits([1, 2], [1, 2], ulp_twins=["1-1", "5-5"])


def test_train_blocks_cut_the_refits_in_order_and_name_each_block_by_its_refits():
    assert train_blocks([1, 2, 3, 4, 5], 2) == {"seeds1_2": [1, 2], "seeds3_4": [3, 4], "seeds5": [5]}
    assert train_blocks([1, 2, 3], 1) == {"seeds1": [1], "seeds2": [2], "seeds3": [3]}
    assert train_blocks([7, 8], 10) == {"seeds7_8": [7, 8]}
    assert train_blocks(["1-2", "1-3", "2-1"], 2) == {"seeds1-2_1-3": ["1-2", "1-3"], "seeds2-1": ["2-1"]}
    assert all(
        re.fullmatch(BLOCK_WILDCARD, name) for name in ("seeds1", "seeds1_2_3", "seeds1-2_10-3", block_name([5]))
    )
    assert not any(re.fullmatch(BLOCK_WILDCARD, name) for name in ("seeds", "seeds1_", "seeds1__2", "seed1", "1_2"))
    with pytest.raises(ValueError, match="seeds_per_job must be at least 1, not 0"):
        train_blocks([1], 0)


def test_held_out_seeds_follow_the_first_and_refuse_a_refits_seed():
    from headstab.plan.seed_design import held_out_seeds

    assert held_out_seeds(100, 3, {"a": [1, 2], "b": [99, 103]}) == [100, 101, 102]
    with pytest.raises(ValueError, match=r"seeds 3-6\) would reuse the seeds of refits \{'b': \[3, 4\]\}.*above 9"):
        held_out_seeds(3, 4, {"a": [1, 2, 9], "b": [4, 3, 7]})
    with pytest.raises(ValueError, match="head_types.held_out_first_seed"):
        held_out_seeds(1, 2, {"a": [2]})
    with pytest.raises(ValueError, match="'head_types.held_out_draws' must be at least 2; got 1"):
        held_out_seeds(100, 1, {})
