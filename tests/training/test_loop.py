"""The training loop: loss goes down, outputs are written, seeds are deterministic, divergence stops the run."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.training import DivergenceError, NonFiniteLossError, train_refit
from headstab.training.checkpoint import load_latest_state

from .conftest import final_state, patch_loss, quiet, read_log, states_equal, write_shards


def test_loss_goes_down_and_outputs_are_written(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=None, log_every=4, checkpoint_every=8)  # 64 windows -> 16 steps
    meta = train_refit(spec, 1, cyclic_shards, tmp_path, quiet())
    rows = read_log(tmp_path / "train_log.csv")
    assert [int(r["step"]) for r in rows] == [4, 8, 12, 16]
    assert [int(r["tokens"]) for r in rows] == [256, 512, 768, 1024]
    assert float(rows[-1]["loss"]) < 0.5 * float(rows[0]["loss"])
    saved = json.loads((tmp_path / "meta.json").read_text())
    assert saved == json.loads(json.dumps(meta))
    assert saved["steps"] == 16 and saved["tokens_trained"] == 1024 and saved["seed"] == 1
    assert saved["architecture"]["name"] == "tiny" and saved["environment"]["device"] == "cpu"
    assert saved["weight_matrix_params"] == spec.n_params
    # Two full states are kept while training (a fallback if the newest is corrupt), the newest one after.
    assert sorted(p.name for p in tmp_path.glob("state_*")) == ["state_00000016.pt", "state_00000016.pt.sha256"]


def test_same_seed_trains_to_identical_weights_and_seeds_differ(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=4 * 4 * 16)  # 4 steps
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        train_refit(spec, seed, cyclic_shards, tmp_path / name, quiet())
    assert states_equal(final_state(tmp_path / "a"), final_state(tmp_path / "b"))
    a, c = final_state(tmp_path / "a"), final_state(tmp_path / "c")
    assert all(not torch.equal(a[k], c[k]) for k in a if k.endswith("q.weight") or k == "embed.weight")


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tiny_spec, cyclic_shards, tmp_path, monkeypatch):
    patch_loss(monkeypatch, range(6, 100), lambda model, loss: loss * float("nan"))
    spec = tiny_spec(n_tokens=10 * 4 * 16, checkpoint_every=4, log_every=8)
    with pytest.raises(NonFiniteLossError) as err:
        train_refit(spec, 1, cyclic_shards, tmp_path, quiet())
    message = str(err.value)
    assert "tiny seed 1: loss is nan at step 6" in message
    assert f"checkpoint before it, {tmp_path / 'state_00000004.pt'}, is kept" in message
    assert "`architectures.tiny.lr` to 0.001 (lr / 10)" in message
    assert "training restarts from step 0 because the checkpoints were written with another lr" in message
    assert "continues from the last good checkpoint" not in message
    assert not (tmp_path / "final.pt").exists() and not (tmp_path / "meta.json").exists()
    state, path = load_latest_state(tmp_path)
    assert path == tmp_path / "state_00000004.pt" and state["step"] == 4
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_non_finite_weights_are_never_checkpointed(tiny_spec, cyclic_shards, tmp_path, monkeypatch):
    def finite_loss_with_nan_gradient(model, loss):
        poison = torch.sqrt(-next(model.parameters()).abs().sum() - 1)  # NaN, and so is its gradient
        return torch.where(torch.tensor(True), loss, poison)  # the value stays finite

    patch_loss(monkeypatch, [4], finite_loss_with_nan_gradient)
    with pytest.raises(NonFiniteLossError, match=r"tiny seed 1: the weights are not finite after step 4"):
        train_refit(tiny_spec(n_tokens=8 * 64, checkpoint_every=4), 1, cyclic_shards, tmp_path, quiet())
    assert not list(tmp_path.glob("state_*")) and not (tmp_path / "final.pt").exists()


def test_divergence_without_nan_stops_naming_loss_threshold_and_keys(tiny_spec, cyclic_shards, tmp_path):
    # lr 1e3: losses near 1e7, finite (at 1e6 the residual stream overflows float32 in LayerNorm's variance: NaN)
    spec = tiny_spec(lr=1e3, n_tokens=8 * 64, checkpoint_every=4, log_every=4)
    with pytest.raises(DivergenceError) as err:
        train_refit(spec, 1, cyclic_shards, tmp_path, quiet())
    assert not isinstance(err.value, NonFiniteLossError)
    message = str(err.value)
    threshold = 3.0 * math.log(32)
    match = re.search(r"tiny seed 1: loss (\S+) at step (\d+) is above the divergence threshold (\S+) ", message)
    assert match, message
    assert float(match[1]) > threshold and int(match[2]) == 2 and match[3] == f"{threshold:.3g}"
    for needed in (
        "divergence_factor 3 x ln(d_vocab 32)",
        "No full-state checkpoint was written",
        "`architectures.tiny.lr` to 100 (lr / 10)",
        "`architectures.tiny.divergence_factor`",
    ):
        assert needed in message, needed
    assert not (tmp_path / "final.pt").exists() and not list(tmp_path.glob("state_*"))
    # A looser threshold lets the same run finish (the factor is a stopping rule, not part of the identity).
    meta = train_refit(tiny_spec(lr=1e3, n_tokens=8 * 64, divergence_factor=1e20), 1, cyclic_shards, tmp_path, quiet())
    assert meta["final_loss"] > 1e6


def test_divergence_factor_defaults_to_3_and_architecture_defaults_override_it(monkeypatch):
    from headstab.plan.config import REPO_ROOT, architecture_spec, load_yaml, validate_config
    from headstab.plan.spec import ConfigError

    monkeypatch.chdir(REPO_ROOT)  # the config's prompt paths start at the repository root
    config = validate_config(load_yaml("tests/config/tiny.yaml"))
    assert architecture_spec(config, "l2_h4").divergence_factor == 3.0
    config["architecture_defaults"]["divergence_factor"] = 5
    config["architectures"]["l2_h4_wd"]["divergence_factor"] = 8
    validate_config(config)
    assert architecture_spec(config, "l2_h4").divergence_factor == 5
    assert architecture_spec(config, "l2_h4_wd").divergence_factor == 8
    config["architectures"]["l2_h4"]["divergence_factor"] = 1
    with pytest.raises(ConfigError, match=r"architectures\.l2_h4\.divergence_factor"):
        validate_config(config)


def test_following_the_divergence_advice_gives_a_healthy_model(tiny_spec, cyclic_shards, tmp_path):
    """lr 1 on the tiny cycle: the loss jumps from ~3.9 to ~13 > 3 ln 32 at step 2 (both seeds)."""
    out = tmp_path / "out"
    with pytest.raises(DivergenceError) as err:
        train_refit(tiny_spec(lr=1.0, checkpoint_every=1), 1, cyclic_shards, out, quiet())
    message = str(err.value)
    assert f"The last full-state checkpoint before it, {out / 'state_00000001.pt'}, is kept" in message
    suggested = float(re.search(r"`architectures\.tiny\.lr` to (\S+) ", message)[1])
    assert suggested == 0.1
    spec = tiny_spec(lr=suggested, checkpoint_every=1)
    meta = train_refit(spec, 1, cyclic_shards, out, quiet())
    assert meta["resumed_from"] is None and "lr (checkpoint 1.0, now 0.1)" in meta["restarted_because"]
    weights = final_state(out)
    assert meta["final_loss"] < math.log(32)
    assert max(t.abs().max().item() for t in weights.values()) < 100
    train_refit(spec, 1, cyclic_shards, tmp_path / "fresh", quiet())
    assert states_equal(final_state(tmp_path / "fresh"), weights)


def test_padded_and_unpadded_vocabularies_train_the_same_loss_curve_and_final_shapes(tiny_spec, tmp_path):
    """The tiny vocabulary of 32 padded to 128 inside the model, or not: the same train_log.csv to its 6 decimals plus
    the rounding of a mean over the batch of log-sum-exps, and final.pt of the same names and shapes."""
    rng = np.random.default_rng(5)
    shards = write_shards(tmp_path, [rng.integers(0, 32, 64 * 16)])
    spec = tiny_spec(n_tokens=10 * 4 * 16, log_every=1, checkpoint_every=5, optimizer="adamw", weight_decay=0.1)
    for multiple in (128, 1):
        meta = train_refit(spec, 1, shards, tmp_path / f"x{multiple}", quiet(vocab_multiple=multiple))
        assert meta["training"]["vocab_multiple"] == multiple
    padded, unpadded = (read_log(tmp_path / f"x{m}" / "train_log.csv") for m in (128, 1))
    losses = np.array([[float(row["loss"]) for row in log] for log in (padded, unpadded)])
    assert losses.shape == (2, 10)
    atol = 1e-6 + reduction_atol(np.float32, spec.d_vocab + 4 * 15, float(losses.max()))
    np.testing.assert_allclose(losses[0], losses[1], rtol=0, atol=atol)
    a, b = final_state(tmp_path / "x128"), final_state(tmp_path / "x1")
    assert list(a) == list(b) and all(a[name].shape == b[name].shape for name in a)
    assert a["embed.weight"].shape == (32, 16) and a["unembed.weight"].shape == (32, 16)
