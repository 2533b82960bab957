"""Snapshots along training: step 0 rebuilt from the seed, later steps kept by train, resumes keep them."""

from __future__ import annotations

import json

import pytest
import torch

from headstab.plan.spec import spec_from_dict
from headstab.refits.models import build_model, load_verified_state_dict
from headstab.training import TrainingError, loop, train_refit
from headstab.training.snapshots import SnapshotError, publish_snapshot, staged_snapshot_dir, write_init_weights

from .conftest import SimulatedKill, final_state, kill_after, quiet, states_equal


def _weights(path) -> dict[str, torch.Tensor]:
    return load_verified_state_dict(path)  # checks the sha256 its meta.json records


def test_init_weights_are_bit_identical_to_the_model_training_starts_from(
    tiny_spec, cyclic_shards, tmp_path, monkeypatch
):
    spec = tiny_spec(n_tokens=4 * 4 * 16)
    meta = write_init_weights(spec, 3, tmp_path / "init/final.pt")
    assert meta["source"] == "initialisation" and meta["seed"] == 3 and meta["step"] == 0
    again = write_init_weights(spec, 3, tmp_path / "again/final.pt")
    assert again["final_weights_sha256"] == meta["final_weights_sha256"]  # bit-identical bytes

    started_from = {}
    real_assemble = loop.assemble

    def recording_assemble(*args, **kwargs):
        model, optimizer = real_assemble(*args, **kwargs)
        started_from.update(model.seed_state_dict(0))
        return model, optimizer

    monkeypatch.setattr(loop, "assemble", recording_assemble)
    with pytest.raises(SimulatedKill):  # stop after the first step: only the starting point matters
        train_refit(spec, 3, cyclic_shards, tmp_path / "train", quiet(on_step_end=kill_after(1)))
    assert states_equal(_weights(tmp_path / "init/final.pt"), started_from)
    other_seed = {k: v for k, v in build_model(spec, 4).state_dict().items()}
    assert not torch.equal(other_seed["embed.weight"], started_from["embed.weight"])


def test_training_keeps_the_weights_of_each_snapshot_step(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=4 * 4 * 16, snapshot_steps=(0, 1, 3, 4), checkpoint_every=2)  # 4 steps
    train_refit(spec, 1, cyclic_shards, tmp_path / "snap", quiet())
    staged = sorted(p.name for p in (tmp_path / "snap/snapshots").iterdir())
    assert staged == ["step1", "step3", "step4"]  # step 0 is rule init_weights's
    last = _weights(staged_snapshot_dir(tmp_path / "snap", 4) / "final.pt")
    assert states_equal(last, final_state(tmp_path / "snap"))
    meta = json.loads((staged_snapshot_dir(tmp_path / "snap", 3) / "meta.json").read_text())
    assert meta["step"] == 3 and meta["tokens_trained"] == 3 * 64 and meta["source"] == "training"

    # The snapshot of step 3 is the final weights of a 3-step run of the same refit.
    short = tiny_spec(n_tokens=3 * 4 * 16)
    train_refit(short, 1, cyclic_shards, tmp_path / "short", quiet())
    assert states_equal(
        _weights(staged_snapshot_dir(tmp_path / "snap", 3) / "final.pt"), final_state(tmp_path / "short")
    )

    published = publish_snapshot(tmp_path / "snap", 3, tmp_path / "pub/final.pt", "tiny", 1)
    assert published["step"] == 3 and states_equal(_weights(tmp_path / "pub/final.pt"), final_state(tmp_path / "short"))
    with pytest.raises(SnapshotError, match=r"no verified snapshot of step 2 .*snapshot_steps.*--forcerun train"):
        publish_snapshot(tmp_path / "snap", 2, tmp_path / "pub2/final.pt", "tiny", 1)


def test_a_resumed_run_keeps_its_snapshots_and_ends_as_an_uninterrupted_one(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=6 * 4 * 16, snapshot_steps=(1, 5), checkpoint_every=2)
    train_refit(spec, 1, cyclic_shards, tmp_path / "whole", quiet())
    with pytest.raises(SimulatedKill):
        train_refit(spec, 1, cyclic_shards, tmp_path / "killed", quiet(on_step_end=kill_after(3)))
    meta = train_refit(spec, 1, cyclic_shards, tmp_path / "killed", quiet())
    assert meta["resumed_from"].endswith("state_00000002.pt")
    assert states_equal(final_state(tmp_path / "killed"), final_state(tmp_path / "whole"))
    for step in (1, 5):
        assert states_equal(
            _weights(staged_snapshot_dir(tmp_path / "killed", step) / "final.pt"),
            _weights(staged_snapshot_dir(tmp_path / "whole", step) / "final.pt"),
        )


def test_snapshot_steps_added_after_training_restart_the_refit_from_step_0(tiny_spec, cyclic_shards, tmp_path):
    plain = tiny_spec(n_tokens=4 * 4 * 16, checkpoint_every=2)
    train_refit(plain, 1, cyclic_shards, tmp_path, quiet())  # keeps its full state of step 4
    meta = train_refit(tiny_spec(n_tokens=4 * 4 * 16, checkpoint_every=2, snapshot_steps=(2,)), 1, cyclic_shards,
                       tmp_path, quiet())  # fmt: skip
    assert meta["resumed_from"] is None and "did not keep the snapshots of steps [2]" in meta["restarted_because"]
    assert (staged_snapshot_dir(tmp_path, 2) / "final.pt").is_file()


def test_snapshot_steps_leave_the_job_spec_of_other_architectures_unchanged(tiny_spec):
    plain, snap = tiny_spec(), tiny_spec(snapshot_steps=(0, 2))
    assert "snapshot_steps" not in plain.to_dict()
    assert snap.to_dict()["snapshot_steps"] == [0, 2] and spec_from_dict(snap.to_dict()) == snap
    assert spec_from_dict(plain.to_dict()) == plain


def test_a_snapshot_step_beyond_the_run_fails_before_training(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=4 * 4 * 16, snapshot_steps=(9,))
    with pytest.raises(TrainingError, match=r"snapshot step 9 is beyond its 4 training steps.*tiny.snapshot_steps"):
        train_refit(spec, 1, cyclic_shards, tmp_path, quiet())
