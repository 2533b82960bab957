"""Training: data windows and order, budget, vocabulary checks, determinism, kill-and-resume, restarts, divergence stop."""

from __future__ import annotations

import csv
import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from headstab import training
from headstab.training import (
    DivergenceError,
    NonFiniteLossError,
    TokenWindows,
    TrainingError,
    check_vocabulary,
    train_refit,
    training_steps,
    window_order,
)

PERIOD = np.array([5, 17, 3, 29, 11, 2, 23, 8, 14, 30, 1, 19, 26, 7, 12, 21])  # a fixed cycle: learnable


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a shared 2-core machine, a second spinning OpenMP thread makes small steps ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_shards(directory: Path, arrays, dtype=np.uint16) -> list[Path]:
    paths = []
    for i, array in enumerate(arrays):
        path = directory / f"shard_{i:03d}.npy"
        np.save(path, np.asarray(array, dtype=dtype))
        paths.append(path)
    return paths


@pytest.fixture
def cyclic_shards(tmp_path):
    """Two shards of a repeating 16-token cycle: 40 + 24 windows of 16 tokens."""
    return write_shards(tmp_path, [np.tile(PERIOD, 40), np.tile(PERIOD, 24)])


def read_log(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def final_state(out_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(out_dir / "final.pt", weights_only=True)


def states_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class SimulatedKill(Exception):
    pass


def kill_after(step_to_kill: int):
    def callback(step: int) -> None:
        if step == step_to_kill:
            raise SimulatedKill(step)

    return callback


# ---------------------------------------------------------------- data
def test_windows_cut_each_shard_and_drop_short_tails(tmp_path):
    paths = write_shards(tmp_path, [np.arange(0, 40), np.arange(100, 130)], dtype=np.uint32)
    windows = TokenWindows.open(paths, seq_len=8)
    assert windows.n_windows == 5 + 3  # 40 // 8 and 30 // 8
    batch = windows.batch(np.array([5, 0, 7, 4]))
    assert batch.dtype == torch.int64 and batch.shape == (4, 8)
    assert batch[0].tolist() == list(range(100, 108))
    assert batch[1].tolist() == list(range(0, 8))
    assert batch[2].tolist() == list(range(116, 124))
    assert batch[3].tolist() == list(range(32, 40))
    assert windows.max_token_id() == 129


def test_data_order_is_a_seeded_permutation_per_epoch():
    first = window_order(50, seed=1, n_needed=50)
    assert sorted(first.tolist()) == list(range(50))
    assert np.array_equal(first, window_order(50, seed=1, n_needed=50))
    assert not np.array_equal(first, window_order(50, seed=2, n_needed=50))
    two_epochs = window_order(50, seed=1, n_needed=100)
    assert np.array_equal(two_epochs[:50], first)
    assert sorted(two_epochs[50:].tolist()) == list(range(50))
    assert np.array_equal(window_order(50, seed=1, n_needed=20), first[:20])


def test_budget_from_n_tokens_or_epochs(tiny_spec):
    assert training_steps(tiny_spec(n_tokens=None), n_windows=64, corpus_label="c") == 16  # 64 windows / batch 4
    assert training_steps(tiny_spec(n_tokens=None, epochs=2), n_windows=64, corpus_label="c") == 32
    assert training_steps(tiny_spec(n_tokens=640), n_windows=64, corpus_label="c") == 10  # 640 // (4 * 16)
    assert training_steps(tiny_spec(n_tokens=700), n_windows=64, corpus_label="c") == 10


def test_corpus_too_small_names_meta_file_counts_and_keys(tiny_spec, cyclic_shards, tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text("{}")
    spec = tiny_spec(n_tokens=100_000)
    with pytest.raises(TrainingError) as err:
        train_refit(spec, 1, cyclic_shards, tmp_path / "out", corpus_meta_path=meta, progress=False)
    message = str(err.value)
    for needed in (str(meta), "64 windows", "1,024 tokens usable", "100,000 tokens",
                   "architectures.tiny.n_tokens", "corpora.tiny_corpus.n_tokens"):
        assert needed in message, needed
    assert not (tmp_path / "out" / "final.pt").exists()


def test_tokenizer_larger_than_d_vocab_is_refused(tiny_spec):
    with pytest.raises(TrainingError, match=r"tokenizer tok/dir has 40 tokens, more than d_vocab 32 of architecture 'tiny'.*architectures\.tiny\.d_vocab"):
        check_vocabulary(tiny_spec(), tokenizer_size=40, max_token_id=10, tokenizer_label="tok/dir", corpus_label="c")
    check_vocabulary(tiny_spec(), tokenizer_size=32, max_token_id=31, tokenizer_label="tok/dir", corpus_label="c")


def test_tokenizer_dir_is_checked_before_training(tiny_spec, cyclic_shards, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(40)}
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="w0")), unk_token="w0")
    fast.save_pretrained(tmp_path / "tok")
    with pytest.raises(TrainingError, match=rf"tokenizer {tmp_path / 'tok'} has 40 tokens.*d_vocab 32"):
        train_refit(tiny_spec(), 1, cyclic_shards, tmp_path / "out", tokenizer_dir=tmp_path / "tok", progress=False)


def test_token_ids_beyond_d_vocab_are_refused(tiny_spec, tmp_path):
    shards = write_shards(tmp_path, [np.full(64, 40)])
    with pytest.raises(TrainingError, match=r"holds token id 40, outside d_vocab 32 of architecture 'tiny'"):
        train_refit(tiny_spec(), 1, shards, tmp_path / "out", progress=False)


# ---------------------------------------------------------------- training
def test_loss_goes_down_and_outputs_are_written(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=None, log_every=4, checkpoint_every=8)  # 64 windows -> 16 steps
    meta = train_refit(spec, 1, cyclic_shards, tmp_path, progress=False)
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
        train_refit(spec, seed, cyclic_shards, tmp_path / name, progress=False)
    assert states_equal(final_state(tmp_path / "a"), final_state(tmp_path / "b"))
    a, c = final_state(tmp_path / "a"), final_state(tmp_path / "c")
    assert all(not torch.equal(a[k], c[k]) for k in a if k.endswith("q.weight") or k == "embed.weight")


@pytest.mark.parametrize("kill_at", [6, 8])
def test_killed_run_resumes_to_bit_identical_weights(tiny_spec, cyclic_shards, tmp_path, kill_at):
    spec = tiny_spec(n_tokens=10 * 4 * 16, checkpoint_every=4, log_every=3, optimizer="adamw", weight_decay=0.1)
    train_refit(spec, 7, cyclic_shards, tmp_path / "whole", progress=False)
    with pytest.raises(SimulatedKill):
        train_refit(spec, 7, cyclic_shards, tmp_path / "killed", progress=False, on_step_end=kill_after(kill_at))
    assert not (tmp_path / "killed" / "final.pt").exists()
    meta = train_refit(spec, 7, cyclic_shards, tmp_path / "killed", progress=False)
    assert meta["resumed_from"].endswith(f"state_{kill_at // 4 * 4:08d}.pt")
    assert states_equal(final_state(tmp_path / "whole"), final_state(tmp_path / "killed"))
    strip = lambda rows: [{k: r[k] for k in ("step", "tokens", "loss", "lr")} for r in rows]  # noqa: E731
    whole, resumed = (read_log(tmp_path / d / "train_log.csv") for d in ("whole", "killed"))
    assert strip(whole) == strip(resumed) and [r["step"] for r in whole] == ["3", "6", "9", "10"]


def test_corrupt_checkpoint_is_reported_and_skipped(tiny_spec, cyclic_shards, tmp_path, caplog):
    spec = tiny_spec(n_tokens=10 * 4 * 16, checkpoint_every=4)
    train_refit(spec, 3, cyclic_shards, tmp_path / "whole", progress=False)
    out = tmp_path / "killed"
    with pytest.raises(SimulatedKill):
        train_refit(spec, 3, cyclic_shards, out, progress=False, on_step_end=kill_after(9))
    newest = out / "state_00000008.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(spec, 3, cyclic_shards, out, progress=False)
    assert f"checkpoint {newest} fails its sha256 check" in caplog.text
    assert meta["resumed_from"] == str(out / "state_00000004.pt")
    assert states_equal(final_state(tmp_path / "whole"), final_state(out))


def test_checkpoint_of_another_configuration_restarts_from_step_0(tiny_spec, cyclic_shards, tmp_path, caplog):
    with pytest.raises(SimulatedKill):
        train_refit(tiny_spec(n_tokens=640), 1, cyclic_shards, tmp_path / "out", progress=False, on_step_end=kill_after(5))
    spec = tiny_spec(n_tokens=640, batch_size=2)
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(spec, 1, cyclic_shards, tmp_path / "out", progress=False)
    assert f"checkpoint {tmp_path / 'out' / 'state_00000004.pt'} cannot be resumed" in caplog.text
    assert "batch_size (checkpoint 4, now 2)" in caplog.text and "restarts from step 0" in caplog.text
    assert meta["resumed_from"] is None and "batch_size (checkpoint 4, now 2)" in meta["restarted_because"]
    train_refit(spec, 1, cyclic_shards, tmp_path / "fresh", progress=False)
    assert states_equal(final_state(tmp_path / "fresh"), final_state(tmp_path / "out"))


def test_changed_lr_restarts_from_step_0_and_equals_a_fresh_run(tiny_spec, cyclic_shards, tmp_path, caplog):
    """A finished run keeps its newest full state; rerun with another lr, it must not continue from it."""
    out = tmp_path / "out"
    train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, out, progress=False)
    assert (out / "state_00000008.pt").is_file()
    new = tiny_spec(n_tokens=8 * 64, lr=3e-3)
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(new, 1, cyclic_shards, out, progress=False)
    assert f"checkpoint {out / 'state_00000008.pt'} cannot be resumed" in caplog.text
    assert "lr (checkpoint 0.01, now 0.003)" in caplog.text and "resuming with lr" not in caplog.text
    assert meta["resumed_from"] is None and "lr (checkpoint 0.01, now 0.003)" in meta["restarted_because"]
    assert meta["architecture"]["lr"] == 3e-3
    train_refit(new, 1, cyclic_shards, tmp_path / "fresh", progress=False)
    assert states_equal(final_state(tmp_path / "fresh"), final_state(out))
    strip = lambda rows: [{k: r[k] for k in ("step", "tokens", "loss", "lr")} for r in rows]  # noqa: E731
    assert strip(read_log(out / "train_log.csv")) == strip(read_log(tmp_path / "fresh" / "train_log.csv"))
    # The stale full state is gone; the one left is the new run's.
    state, path = training.load_latest_state(out)
    assert path == out / "state_00000008.pt" and state["identity"]["lr"] == 3e-3
    # A rerun of the same configuration resumes from it and reports no restart.
    again = train_refit(new, 1, cyclic_shards, out, progress=False)
    assert again["resumed_from"] == str(out / "state_00000008.pt") and again["restarted_because"] is None


def test_training_code_version_is_part_of_the_identity(tiny_spec, cyclic_shards, tmp_path, monkeypatch, caplog):
    train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, tmp_path, progress=False)
    monkeypatch.setattr(training, "TRAINING_CODE_VERSION", training.TRAINING_CODE_VERSION + 1)
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, tmp_path, progress=False)
    assert meta["resumed_from"] is None and "training_code_version" in meta["restarted_because"]


def test_raised_budget_resumes_and_equals_a_straight_run(tiny_spec, cyclic_shards, tmp_path):
    """n_tokens only moves where the run stops: the data order of a longer run extends a shorter one's."""
    train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, tmp_path / "out", progress=False)
    meta = train_refit(tiny_spec(n_tokens=16 * 64), 1, cyclic_shards, tmp_path / "out", progress=False)
    assert meta["resumed_from"] == str(tmp_path / "out" / "state_00000008.pt") and meta["restarted_because"] is None
    train_refit(tiny_spec(n_tokens=16 * 64), 1, cyclic_shards, tmp_path / "straight", progress=False)
    assert states_equal(final_state(tmp_path / "straight"), final_state(tmp_path / "out"))


def patch_loss(monkeypatch, steps, change):
    """Make training's loss `change(model, loss)` at the given 1-based steps, the real loss elsewhere."""
    real_loss = training.next_token_loss
    calls = []

    def patched(model, tokens):
        calls.append(1)
        loss = real_loss(model, tokens)
        return change(model, loss) if len(calls) in steps else loss

    monkeypatch.setattr(training, "next_token_loss", patched)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tiny_spec, cyclic_shards, tmp_path, monkeypatch):
    patch_loss(monkeypatch, range(6, 100), lambda model, loss: loss * float("nan"))
    spec = tiny_spec(n_tokens=10 * 4 * 16, checkpoint_every=4, log_every=8)
    with pytest.raises(NonFiniteLossError) as err:
        train_refit(spec, 1, cyclic_shards, tmp_path, progress=False)
    message = str(err.value)
    assert "tiny seed 1: loss is nan at step 6" in message
    assert f"checkpoint before it, {tmp_path / 'state_00000004.pt'}, is kept" in message
    assert "`architectures.tiny.lr` to 0.001 (lr / 10)" in message
    assert "training restarts from step 0 because the checkpoints were written with another lr" in message
    assert "continues from the last good checkpoint" not in message
    assert not (tmp_path / "final.pt").exists() and not (tmp_path / "meta.json").exists()
    state, path = training.load_latest_state(tmp_path)
    assert path == tmp_path / "state_00000004.pt" and state["step"] == 4
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_non_finite_weights_are_never_checkpointed(tiny_spec, cyclic_shards, tmp_path, monkeypatch):
    def finite_loss_with_nan_gradient(model, loss):
        poison = torch.sqrt(-next(model.parameters()).abs().sum() - 1)  # NaN, and so is its gradient
        return torch.where(torch.tensor(True), loss, poison)  # the value stays finite

    patch_loss(monkeypatch, [4], finite_loss_with_nan_gradient)
    with pytest.raises(NonFiniteLossError, match=r"tiny seed 1: the weights are not finite after step 4"):
        train_refit(tiny_spec(n_tokens=8 * 64, checkpoint_every=4), 1, cyclic_shards, tmp_path, progress=False)
    assert not list(tmp_path.glob("state_*")) and not (tmp_path / "final.pt").exists()


def test_divergence_without_nan_stops_naming_loss_threshold_and_keys(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(lr=1e6, n_tokens=8 * 64, checkpoint_every=4, log_every=4)
    with pytest.raises(DivergenceError) as err:
        train_refit(spec, 1, cyclic_shards, tmp_path, progress=False)
    assert not isinstance(err.value, NonFiniteLossError)
    message = str(err.value)
    threshold = 3.0 * math.log(32)
    match = re.search(r"tiny seed 1: loss (\S+) at step (\d+) is above the divergence threshold (\S+) ", message)
    assert match, message
    assert float(match[1]) > threshold and int(match[2]) == 2 and match[3] == f"{threshold:.3g}"
    for needed in ("divergence_factor 3 x ln(d_vocab 32)", "No full-state checkpoint was written",
                   "`architectures.tiny.lr` to 100000 (lr / 10)", "`architectures.tiny.divergence_factor`"):
        assert needed in message, needed
    assert not (tmp_path / "final.pt").exists() and not list(tmp_path.glob("state_*"))
    # A looser threshold lets the same run finish (the factor is a stopping rule, not part of the identity).
    meta = train_refit(tiny_spec(lr=1e6, n_tokens=8 * 64, divergence_factor=1e20), 1, cyclic_shards, tmp_path, progress=False)
    assert meta["final_loss"] > 1e6


def test_divergence_factor_defaults_to_3_and_architecture_defaults_override_it(monkeypatch):
    from headstab.config import ConfigError, architecture_spec, load_yaml, validate_config

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the config's prompt paths start at the repository root
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
        train_refit(tiny_spec(lr=1.0, checkpoint_every=1), 1, cyclic_shards, out, progress=False)
    message = str(err.value)
    assert f"The last full-state checkpoint before it, {out / 'state_00000001.pt'}, is kept" in message
    suggested = float(re.search(r"`architectures\.tiny\.lr` to (\S+) ", message)[1])
    assert suggested == 0.1
    spec = tiny_spec(lr=suggested, checkpoint_every=1)
    meta = train_refit(spec, 1, cyclic_shards, out, progress=False)
    assert meta["resumed_from"] is None and "lr (checkpoint 1.0, now 0.1)" in meta["restarted_because"]
    weights = final_state(out)
    assert meta["final_loss"] < math.log(32)
    assert max(t.abs().max().item() for t in weights.values()) < 100
    train_refit(spec, 1, cyclic_shards, tmp_path / "fresh", progress=False)
    assert states_equal(final_state(tmp_path / "fresh"), weights)


def test_checkpoint_beyond_a_lowered_budget_restarts_from_step_0(tiny_spec, cyclic_shards, tmp_path, caplog):
    with pytest.raises(SimulatedKill):
        train_refit(tiny_spec(n_tokens=640), 1, cyclic_shards, tmp_path / "out", progress=False, on_step_end=kill_after(9))
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(tiny_spec(n_tokens=6 * 64), 1, cyclic_shards, tmp_path / "out", progress=False)
    assert "state_00000008.pt cannot be resumed (at step 8, beyond the 6 steps now requested)" in caplog.text
    assert meta["resumed_from"] is None and "beyond the 6 steps" in meta["restarted_because"]
    assert not (tmp_path / "out" / "state_00000008.pt").exists()
    train_refit(tiny_spec(n_tokens=6 * 64), 1, cyclic_shards, tmp_path / "fresh", progress=False)
    assert states_equal(final_state(tmp_path / "fresh"), final_state(tmp_path / "out"))


def test_missing_corpus_meta_names_the_rule(tiny_spec, cyclic_shards, tmp_path):
    with pytest.raises(TrainingError, match=r"corpus metadata .*meta\.json does not exist.*rule corpus_meta"):
        train_refit(tiny_spec(), 1, cyclic_shards, tmp_path / "out", corpus_meta_path=tmp_path / "meta.json", progress=False)
