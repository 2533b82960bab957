"""headstab.training.perturbation and a grid cell's one-ulp twin: the same seeds, every weight one ulp up."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import headstab.training.refit as refit_module
from headstab.refits.models import build_model
from headstab.training import RefitTarget, TrainingData, train_refit, train_refits
from headstab.training.checkpoint import load_latest_state
from headstab.training.initial_weights import initial_state_dict
from headstab.training.perturbation import ULP, nudge_one_ulp, nudge_weights_one_ulp

from .conftest import final_state, quiet, read_log, states_equal
from .test_stacked_training import assert_same_refit, job_spec


def test_every_nonzero_weight_moves_exactly_one_ulp_up_and_nothing_else_moves(tiny_spec):
    spec = tiny_spec()
    nudged, fresh = build_model(spec, 3), build_model(spec, 3)
    moved = nudge_one_ulp(nudged)
    before, after = fresh.state_dict(), nudged.state_dict()
    assert before.keys() == after.keys()
    total = 0
    for name, value in before.items():
        old, new = value.numpy(), after[name].numpy()
        assert old.dtype == np.float32, name
        # one ulp = one step of the float's bit pattern: +1 for a positive value, -1 for a negative one
        steps = new.view(np.int32).astype(np.int64) - old.view(np.int32)
        np.testing.assert_array_equal(steps, np.where(old > 0, 1, np.where(old < 0, -1, 0)), err_msg=name)
        assert (new[old != 0] > old[old != 0]).all(), name
        total += int((old != 0).sum())
    assert moved == total > 0
    biases = [name for name, value in before.items() if name.endswith("bias") and not value.any()]
    assert biases and all(not after[name].any() for name in biases)


class _Tied(torch.nn.Module):
    """Embedding and unembedding tied, a nonzero float buffer, an integer buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4, 3)
        self.unembed = torch.nn.Linear(3, 4, bias=False)
        self.unembed.weight = self.embed.weight
        self.register_buffer("scale", torch.full((3,), 0.5))
        self.register_buffer("positions", torch.arange(3))


def test_a_tied_weight_moves_once_and_buffers_are_not_weights():
    torch.manual_seed(0)
    model = _Tied()
    old = model.embed.weight.detach().clone()
    assert nudge_one_ulp(model) == old.numel()
    expected = np.nextafter(old.numpy(), np.float32(np.inf))
    np.testing.assert_array_equal(model.embed.weight.detach().numpy(), expected)  # once, not twice
    assert model.unembed.weight is model.embed.weight
    assert torch.equal(model.scale, torch.full((3,), 0.5)) and torch.equal(model.positions, torch.arange(3))


def test_the_nudged_initial_state_dict_is_the_nudged_model(tiny_spec):
    """What training starts a twin from (a state dict) is build_model's weights moved by nudge_one_ulp."""
    spec = tiny_spec()
    weights, model = initial_state_dict(spec, 3), build_model(spec, 3)
    assert nudge_weights_one_ulp(weights) == nudge_one_ulp(model)
    nudged = model.state_dict()
    assert weights.keys() <= nudged.keys()
    for name, value in weights.items():
        assert torch.equal(value, nudged[name]), name


def nudged_initial_state_dict(spec, seed):
    weights = initial_state_dict(spec, seed)
    nudge_weights_one_ulp(weights)
    return weights


def test_a_twin_is_its_cell_trained_from_the_nudged_weights_bit_for_bit(
    tiny_spec, cyclic_shards, tmp_path, monkeypatch
):
    """Same init seed, same data seed (2, not the init seed's order), same steps: only the start differs."""
    spec = tiny_spec(n_tokens=4 * 4 * 16)  # 4 steps
    cell = train_refit(spec, "1-2", cyclic_shards, tmp_path / "cell", quiet())
    twin = train_refit(spec, "1-2-ulp", cyclic_shards, tmp_path / "twin", quiet())
    monkeypatch.setattr(refit_module, "initial_state_dict", nudged_initial_state_dict)
    by_hand = train_refit(spec, "1-2", cyclic_shards, tmp_path / "by_hand", quiet())
    assert states_equal(final_state(tmp_path / "twin"), final_state(tmp_path / "by_hand"))
    losses = [[row["loss"] for row in read_log(tmp_path / name / "train_log.csv")] for name in ("twin", "by_hand")]
    assert losses[0] == losses[1] and losses[0]
    assert not states_equal(final_state(tmp_path / "cell"), final_state(tmp_path / "twin"))
    assert (twin["init_seed"], twin["data_seed"]) == (cell["init_seed"], cell["data_seed"]) == (1, 2)
    assert by_hand["windows_available"] == twin["windows_available"]


def test_a_twin_stacked_with_its_cell_trains_as_it_trains_alone(tiny_spec, cyclic_shards, tmp_path):
    """k = 4 with the twin beside its cell equals each refit trained alone, bit for bit (CPU)."""
    spec, names = job_spec(tiny_spec), ("1-1", "1-1-ulp", 2, "2-3")
    targets = [RefitTarget(name, tmp_path / "stack" / f"seed{name}") for name in names]
    metas = train_refits(spec, targets, TrainingData.of(cyclic_shards), quiet())
    for name in names:
        train_refit(spec, name, cyclic_shards, tmp_path / "alone" / f"seed{name}", quiet())
        assert_same_refit(tmp_path / "stack" / f"seed{name}", tmp_path / "alone" / f"seed{name}")
    assert [meta.get("init_perturbation") for meta in metas] == [None, ULP, None, None]
    assert not states_equal(
        final_state(tmp_path / "stack" / "seed1-1"), final_state(tmp_path / "stack" / "seed1-1-ulp")
    )


def test_a_twin_trains_under_its_own_identity_and_no_state_of_its_cell_resumes_it(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=4 * 4 * 16)  # 4 steps
    cell = train_refit(spec, "1-1", cyclic_shards, tmp_path / "cell", quiet())
    twin = train_refit(spec, "1-1-ulp", cyclic_shards, tmp_path / "twin", quiet())
    assert twin["init_perturbation"] == ULP and "init_perturbation" not in cell
    assert (twin["init_seed"], twin["data_seed"], twin["seed"]) == (1, 1, "1-1-ulp")
    state, _ = load_latest_state(tmp_path / "twin")
    assert state["identity"]["init_perturbation"] == ULP
    trained = final_state(tmp_path / "twin")
    # the cell's full state copied into the twin's directory is not resumed: the twin restarts, bit for bit
    for path in (tmp_path / "twin").glob("state_*"):
        path.unlink()
    for path in (tmp_path / "cell").glob("state_*"):
        (tmp_path / "twin" / path.name).write_bytes(path.read_bytes())
    again = train_refit(spec, "1-1-ulp", cyclic_shards, tmp_path / "twin", quiet())
    assert again["restarted_because"] is not None
    assert states_equal(trained, final_state(tmp_path / "twin"))
    assert json.loads((tmp_path / "twin" / "meta.json").read_text())["init_perturbation"] == ULP


@pytest.mark.parametrize("name", [1, "1-1"])
def test_refits_without_the_suffix_start_from_the_seeds_weights(tiny_spec, cyclic_shards, tmp_path, name):
    spec = tiny_spec(n_tokens=4 * 4 * 16)
    meta = train_refit(spec, name, cyclic_shards, tmp_path, quiet())
    assert "init_perturbation" not in meta
