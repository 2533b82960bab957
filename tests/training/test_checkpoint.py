"""Full-state checkpoints: kill and resume bit-identically, corrupt states skipped, stale ones restart from step 0."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from headstab.training import TrainingData, checkpoint, train_refit
from headstab.training.checkpoint import load_latest_state

from .conftest import SimulatedKill, final_state, kill_after, quiet, read_log, states_equal


@pytest.mark.parametrize("kill_at", [6, 8])
def test_killed_run_resumes_to_bit_identical_weights(tiny_spec, cyclic_shards, tmp_path, kill_at):
    spec = tiny_spec(n_tokens=10 * 4 * 16, checkpoint_every=4, log_every=3, optimizer="adamw", weight_decay=0.1)
    train_refit(spec, 7, cyclic_shards, tmp_path / "whole", quiet())
    with pytest.raises(SimulatedKill):
        train_refit(spec, 7, cyclic_shards, tmp_path / "killed", quiet(on_step_end=kill_after(kill_at)))
    assert not (tmp_path / "killed" / "final.pt").exists()
    meta = train_refit(spec, 7, cyclic_shards, tmp_path / "killed", quiet())
    assert meta["resumed_from"].endswith(f"state_{kill_at // 4 * 4:08d}.pt")
    assert states_equal(final_state(tmp_path / "whole"), final_state(tmp_path / "killed"))
    strip = lambda rows: [{k: r[k] for k in ("step", "tokens", "loss", "lr")} for r in rows]  # noqa: E731
    whole, resumed = (read_log(tmp_path / d / "train_log.csv") for d in ("whole", "killed"))
    assert strip(whole) == strip(resumed) and [r["step"] for r in whole] == ["3", "6", "9", "10"]


def test_corrupt_checkpoint_is_reported_and_skipped(tiny_spec, cyclic_shards, tmp_path, caplog):
    spec = tiny_spec(n_tokens=10 * 4 * 16, checkpoint_every=4)
    train_refit(spec, 3, cyclic_shards, tmp_path / "whole", quiet())
    out = tmp_path / "killed"
    with pytest.raises(SimulatedKill):
        train_refit(spec, 3, cyclic_shards, out, quiet(on_step_end=kill_after(9)))
    newest = out / "state_00000008.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(spec, 3, cyclic_shards, out, quiet())
    assert f"checkpoint {newest} fails its sha256 check" in caplog.text
    assert meta["resumed_from"] == str(out / "state_00000004.pt")
    assert states_equal(final_state(tmp_path / "whole"), final_state(out))


def test_checkpoint_of_another_configuration_restarts_from_step_0(tiny_spec, cyclic_shards, tmp_path, caplog):
    with pytest.raises(SimulatedKill):
        train_refit(tiny_spec(n_tokens=640), 1, cyclic_shards, tmp_path / "out", quiet(on_step_end=kill_after(5)))
    spec = tiny_spec(n_tokens=640, batch_size=2)
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(spec, 1, cyclic_shards, tmp_path / "out", quiet())
    assert f"checkpoint {tmp_path / 'out' / 'state_00000004.pt'} cannot be resumed" in caplog.text
    assert "batch_size (checkpoint 4, now 2)" in caplog.text and "restarts from step 0" in caplog.text
    assert meta["resumed_from"] is None and "batch_size (checkpoint 4, now 2)" in meta["restarted_because"]
    train_refit(spec, 1, cyclic_shards, tmp_path / "fresh", quiet())
    assert states_equal(final_state(tmp_path / "fresh"), final_state(tmp_path / "out"))


def test_changed_lr_restarts_from_step_0_and_equals_a_fresh_run(tiny_spec, cyclic_shards, tmp_path, caplog):
    """A finished run keeps its newest full state; rerun with another lr, it must not continue from it."""
    out = tmp_path / "out"
    train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, out, quiet())
    assert (out / "state_00000008.pt").is_file()
    new = tiny_spec(n_tokens=8 * 64, lr=3e-3)
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(new, 1, cyclic_shards, out, quiet())
    assert f"checkpoint {out / 'state_00000008.pt'} cannot be resumed" in caplog.text
    assert "lr (checkpoint 0.01, now 0.003)" in caplog.text and "resuming with lr" not in caplog.text
    assert meta["resumed_from"] is None and "lr (checkpoint 0.01, now 0.003)" in meta["restarted_because"]
    assert meta["architecture"]["lr"] == 3e-3
    train_refit(new, 1, cyclic_shards, tmp_path / "fresh", quiet())
    assert states_equal(final_state(tmp_path / "fresh"), final_state(out))
    strip = lambda rows: [{k: r[k] for k in ("step", "tokens", "loss", "lr")} for r in rows]  # noqa: E731
    assert strip(read_log(out / "train_log.csv")) == strip(read_log(tmp_path / "fresh" / "train_log.csv"))
    # The stale full state is gone; the one left is the new run's.
    state, path = load_latest_state(out)
    assert path == out / "state_00000008.pt" and state["identity"]["lr"] == 3e-3
    # A rerun of the same configuration resumes from it and reports no restart.
    again = train_refit(new, 1, cyclic_shards, out, quiet())
    assert again["resumed_from"] == str(out / "state_00000008.pt") and again["restarted_because"] is None


def test_training_code_version_is_part_of_the_identity(tiny_spec, cyclic_shards, tmp_path, monkeypatch, caplog):
    train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, tmp_path, quiet())
    monkeypatch.setattr(checkpoint, "TRAINING_CODE_VERSION", checkpoint.TRAINING_CODE_VERSION + 1)
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, tmp_path, quiet())
    assert meta["resumed_from"] is None and "training_code_version" in meta["restarted_because"]


def test_raised_budget_resumes_and_equals_a_straight_run(tiny_spec, cyclic_shards, tmp_path):
    """n_tokens only moves where the run stops: the data order of a longer run extends a shorter one's."""
    train_refit(tiny_spec(n_tokens=8 * 64), 1, cyclic_shards, tmp_path / "out", quiet())
    meta = train_refit(tiny_spec(n_tokens=16 * 64), 1, cyclic_shards, tmp_path / "out", quiet())
    assert meta["resumed_from"] == str(tmp_path / "out" / "state_00000008.pt") and meta["restarted_because"] is None
    train_refit(tiny_spec(n_tokens=16 * 64), 1, cyclic_shards, tmp_path / "straight", quiet())
    assert states_equal(final_state(tmp_path / "straight"), final_state(tmp_path / "out"))


def test_checkpoint_beyond_a_lowered_budget_restarts_from_step_0(tiny_spec, cyclic_shards, tmp_path, caplog):
    with pytest.raises(SimulatedKill):
        train_refit(tiny_spec(n_tokens=640), 1, cyclic_shards, tmp_path / "out", quiet(on_step_end=kill_after(9)))
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(tiny_spec(n_tokens=6 * 64), 1, cyclic_shards, tmp_path / "out", quiet())
    assert "state_00000008.pt cannot be resumed (at step 8, beyond the 6 steps now requested)" in caplog.text
    assert meta["resumed_from"] is None and "beyond the 6 steps" in meta["restarted_because"]
    assert not (tmp_path / "out" / "state_00000008.pt").exists()
    train_refit(tiny_spec(n_tokens=6 * 64), 1, cyclic_shards, tmp_path / "fresh", quiet())
    assert states_equal(final_state(tmp_path / "fresh"), final_state(tmp_path / "out"))


def test_a_checkpoint_past_the_file_size_limit_fails_naming_the_file_and_the_fix(tmp_path):
    """Under `ulimit -f`, training's full-state write failed with torch's 'unexpected pos 704 vs 598'."""
    import errno
    import json
    import subprocess
    import sys

    code = (
        "import json, resource, sys, torch\nfrom pathlib import Path\n"
        "from headstab.training.checkpoint import save_state\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))\n"
        "try:\n    save_state(Path(sys.argv[1]), {'step': 8, 'weights': {'w': torch.zeros(100_000)}}, keep=2)\n"
        "except OSError as error:\n    print(json.dumps([error.errno, error.strerror]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout, result.stderr[-2000:]
    number, message = json.loads(result.stdout)
    assert number == errno.EFBIG
    assert message.startswith(
        f"File too large while writing {tmp_path / 'state_00000008.pt'} ([Errno 27] File too large)"
    )
    assert "at most 65,536 bytes (`ulimit -f`): raise the limit" in message and "rerun the same snakemake" in message
    assert list(tmp_path.iterdir()) == []  # neither the state nor its temporary


# ---------------------------------------------------------------- the corpus in a refit's identity: its content only
def write_corpus_meta(shards, path, **extra) -> None:
    """A corpus meta.json as rule corpus_meta writes it (older code also put the job's environment in it)."""
    from headstab.fileio import sha256_file, write_json_atomic

    records = [{"file": shard.name, "n_tokens": 10, "n_documents": 1, "sha256": sha256_file(shard)} for shard in shards]
    meta = {"corpus": "tiny_corpus", "n_tokens": 20, "dtype": "uint16", "shards": records}
    write_json_atomic(path, {**meta, "tokenizer": {"path": "results/a/tokenizers/tiny", "vocab_size": 32}, **extra})


def test_a_corpus_rebuilt_to_the_same_shards_resumes_every_refit(tiny_spec, cyclic_shards, tmp_path):
    """A rebuild that changes the meta's time, host or paths but not one token must not retrain a step."""
    meta_path = tmp_path / "meta.json"
    write_corpus_meta(cyclic_shards, meta_path, environment={"created": "2026-01-01T00:00:00", "host": "a"})
    data, spec = TrainingData.of(cyclic_shards, corpus_meta_path=meta_path), tiny_spec(n_tokens=10 * 4 * 16)
    train_refit(spec, 3, data, tmp_path / "whole", quiet())
    with pytest.raises(SimulatedKill):
        train_refit(spec, 3, data, tmp_path / "killed", quiet(on_step_end=kill_after(6)))
    write_corpus_meta(cyclic_shards, meta_path, environment={"created": "2026-05-02T09:30:00", "host": "b"})
    meta = train_refit(spec, 3, data, tmp_path / "killed", quiet())
    assert meta["resumed_from"] == str(tmp_path / "killed" / "state_00000004.pt") and meta["restarted_because"] is None
    assert states_equal(final_state(tmp_path / "whole"), final_state(tmp_path / "killed"))
    # the rebuilt corpus of a results directory moved elsewhere, without an environment: the same identity
    write_corpus_meta(cyclic_shards, meta_path, tokenizer={"path": "/elsewhere/tokenizers/tiny", "vocab_size": 32})
    again = train_refit(spec, 3, data, tmp_path / "killed", quiet())
    assert (
        again["resumed_from"] == str(tmp_path / "killed" / "state_00000010.pt") and again["restarted_because"] is None
    )


def test_a_corpus_of_other_tokens_restarts_from_step_0(tiny_spec, cyclic_shards, tmp_path):
    meta_path = tmp_path / "meta.json"
    write_corpus_meta(cyclic_shards, meta_path)
    data, spec = TrainingData.of(cyclic_shards, corpus_meta_path=meta_path), tiny_spec(n_tokens=8 * 64)
    before = train_refit(spec, 1, data, tmp_path / "out", quiet())
    np.save(cyclic_shards[1], np.load(cyclic_shards[1])[::-1].copy())  # the same tokens of shard 1, reversed
    write_corpus_meta(cyclic_shards, meta_path)
    after = train_refit(spec, 1, data, tmp_path / "out", quiet())
    assert after["resumed_from"] is None and "corpus_sha256" in after["restarted_because"]
    assert before["identity"]["corpus_sha256"] != after["identity"]["corpus_sha256"]


@pytest.mark.parametrize("same_meta_file", [True, False])
def test_a_state_of_older_code_resumes_only_when_its_corpus_meta_file_is_unchanged(
    tiny_spec, cyclic_shards, tmp_path, same_meta_file
):
    """Older states identified the corpus by the sha256 of its meta.json file; a killed run resumed after the
    update must not lose its steps, and one whose corpus meta changed since cannot be shown to be of this corpus."""
    import torch

    from headstab.fileio import sha256_file
    from headstab.training.checkpoint import save_state

    meta_path = tmp_path / "meta.json"
    write_corpus_meta(cyclic_shards, meta_path, environment={"created": "2026-01-01T00:00:00"})
    data, spec, out = (
        TrainingData.of(cyclic_shards, corpus_meta_path=meta_path),
        tiny_spec(n_tokens=640),
        tmp_path / "out",
    )
    with pytest.raises(SimulatedKill):
        train_refit(spec, 1, data, out, quiet(on_step_end=kill_after(5)))
    state = torch.load(out / "state_00000004.pt", weights_only=True)
    identity = {key: value for key, value in state["identity"].items() if key != "corpus_sha256"}
    save_state(out, {**state, "identity": {**identity, "corpus_meta_sha256": sha256_file(meta_path)}}, keep=1)
    if not same_meta_file:
        write_corpus_meta(cyclic_shards, meta_path, environment={"created": "2026-05-02T09:30:00"})
    meta = train_refit(spec, 1, data, out, quiet())
    if same_meta_file:
        assert meta["resumed_from"] == str(out / "state_00000004.pt") and meta["restarted_because"] is None
    else:
        assert (
            meta["resumed_from"] is None and "corpus_sha256 (checkpoint 'another corpus'" in meta["restarted_because"]
        )
