"""Refits trained k per job, stacked on a seed axis: each refit ends as it would alone, bit for bit (CPU), through
divergence drops, kills and re-formed stacks; training never imports transformer_lens."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from headstab.plan.seed_design import SHARED_DATA_SEED
from headstab.training import NonFiniteLossError, RefitTarget, TrainingData, loop, train_refit, train_refits
from headstab.training.checkpoint import load_latest_state
from headstab.training.stack import make_optimizer

from .conftest import final_state, patch_loss, quiet, read_log, states_equal, write_shards

REPO = Path(__file__).resolve().parents[2]
NAMES = (1, 2, "3-5", 4)  # k = 4, a seed grid's refit among them: init seed 3, data-order seed 5


def job_spec(tiny_spec, **overrides):
    """10 steps, a log row every 3, a full state every 4 (and at the last step), snapshots at 2 and 7; AdamW."""
    options = {
        "n_tokens": 10 * 4 * 16,
        "log_every": 3,
        "checkpoint_every": 4,
        "snapshot_steps": (2, 7),
        "optimizer": "adamw",
        "weight_decay": 0.1,
    }
    return tiny_spec(**{**options, **overrides})


def train_job(spec, shards, root: Path, names=NAMES, **options) -> list[dict]:
    targets = [RefitTarget(name, root / f"seed{name}") for name in names]
    return train_refits(spec, targets, TrainingData.of(shards), quiet(**options))


def strip(rows: list[dict]) -> list[dict]:
    """A log without its seconds column (wall time)."""
    return [{key: row[key] for key in ("step", "tokens", "loss", "lr")} for row in rows]


def assert_same_refit(a: Path, b: Path) -> None:
    """Weights, log, the newest full state (weights and Adam moments) and every snapshot are bit-identical."""
    assert states_equal(final_state(a), final_state(b))
    assert strip(read_log(a / "train_log.csv")) == strip(read_log(b / "train_log.csv"))
    (state_a, path_a), (state_b, path_b) = load_latest_state(a), load_latest_state(b)
    assert path_a.name == path_b.name and states_equal(state_a["model"], state_b["model"])
    for key in ("exp_avg", "exp_avg_sq"):
        assert states_equal(state_a["optimizer"][key], state_b["optimizer"][key]), key
    assert state_a["optimizer"]["step"] == state_b["optimizer"]["step"] == state_a["step"]
    snapshots = sorted(p.name for p in (a / "snapshots").iterdir())
    assert snapshots == sorted(p.name for p in (b / "snapshots").iterdir())
    for name in snapshots:
        assert states_equal(final_state(a / "snapshots" / name), final_state(b / "snapshots" / name)), name


@pytest.fixture
def alone(tiny_spec, cyclic_shards, tmp_path) -> Path:
    """Each refit of NAMES trained in a job of its own (k = 1): the reference the stacks must equal."""
    root = tmp_path / "alone"
    for name in NAMES:
        train_refit(job_spec(tiny_spec), name, cyclic_shards, root / f"seed{name}", quiet())
    return root


def test_a_stack_trains_every_refit_bit_for_bit_as_it_trains_alone(tiny_spec, cyclic_shards, tmp_path, alone):
    metas = train_job(job_spec(tiny_spec), cyclic_shards, tmp_path / "stack")
    for name, meta in zip(NAMES, metas):
        assert_same_refit(tmp_path / "stack" / f"seed{name}", alone / f"seed{name}")
        assert meta["job_refits"] == list(NAMES) and meta["seed"] == name
    assert (metas[2]["init_seed"], metas[2]["data_seed"]) == (3, 5)
    saved = json.loads((tmp_path / "stack/seed3-5/meta.json").read_text())
    assert saved["training"]["precision"] == "fp32" and saved["identity"]["data_seed"] == 5
    assert not states_equal(final_state(tmp_path / "stack/seed1"), final_state(tmp_path / "stack/seed2"))


def test_a_nan_in_one_refit_drops_it_and_leaves_the_others_bit_identical(
    tiny_spec, cyclic_shards, tmp_path, alone, monkeypatch
):
    def poison_the_second(model, loss):  # refit 2's loss (and so its gradient) NaN while it is in the stack
        if loss.shape[0] != len(NAMES):
            return loss
        return loss * torch.tensor([1.0, float("nan"), 1.0, 1.0])  # its gradient is NaN, the others' untouched

    patch_loss(monkeypatch, range(6, 100), poison_the_second)
    with pytest.raises(NonFiniteLossError) as err:
        train_job(job_spec(tiny_spec), cyclic_shards, tmp_path / "stack")
    message = str(err.value)
    assert message.startswith("1 of the 4 refits of this job stopped (the others finished and wrote their outputs)")
    assert "tiny seed 2: loss is nan at step 6" in message  # read at the log row of step 6
    assert f"checkpoint before it, {tmp_path / 'stack/seed2/state_00000004.pt'}, is kept" in message
    assert not (tmp_path / "stack/seed2/final.pt").exists() and not (tmp_path / "stack/seed2/meta.json").exists()
    state, path = load_latest_state(tmp_path / "stack/seed2")
    assert path.name == "state_00000004.pt" and all(torch.isfinite(t).all() for t in state["model"].values())
    for name in (1, "3-5", 4):
        assert_same_refit(tmp_path / "stack" / f"seed{name}", alone / f"seed{name}")


KILLED_RUN = """
import json, os, signal, sys
from pathlib import Path
from headstab.plan.spec import spec_from_dict
from headstab.training import RefitTarget, TrainingData, TrainingOptions, train_refits

spec, shards, root, names, kill_at = json.loads(sys.argv[1])
def kill(step):
    if step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
targets = [RefitTarget(name, Path(root) / f"seed{name}") for name in names]
train_refits(spec_from_dict(spec), targets, TrainingData.of(shards),
             TrainingOptions(progress=False, device="cpu", threads=1, on_step_end=kill))
"""


def test_a_stack_killed_with_sigkill_resumes_re_formed_and_ends_bit_identical(
    tiny_spec, cyclic_shards, tmp_path, alone, caplog
):
    spec = job_spec(tiny_spec)
    arguments = json.dumps([spec.to_dict(), [str(p) for p in cyclic_shards], str(tmp_path / "killed"), list(NAMES), 6])
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, arguments],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not list((tmp_path / "killed").glob("*/final.pt"))
    # Refit 2 lost its newest full state: it restarts at step 0 while the others resume at step 4, and joins
    # their stack when it reaches step 4.
    (tmp_path / "killed/seed2/state_00000004.pt").unlink()
    with caplog.at_level(logging.INFO, logger="headstab.training"):
        metas = train_job(spec, cyclic_shards, tmp_path / "killed")
    assert [meta["resumed_from"] for meta in metas] == [
        str(tmp_path / "killed/seed1/state_00000004.pt"),
        None,
        str(tmp_path / "killed/seed3-5/state_00000004.pt"),
        str(tmp_path / "killed/seed4/state_00000004.pt"),
    ]
    assert "resuming tiny seed 1 from" in caplog.text and "resuming tiny seed 2" not in caplog.text
    for name in NAMES:
        assert_same_refit(tmp_path / "killed" / f"seed{name}", alone / f"seed{name}")


def test_a_finished_refit_in_a_job_is_exported_again_without_a_step(tiny_spec, cyclic_shards, tmp_path, alone):
    root = tmp_path / "partly"
    train_refit(job_spec(tiny_spec), 1, cyclic_shards, root / "seed1", quiet())
    (root / "seed1/final.pt").unlink()
    metas = train_job(job_spec(tiny_spec), cyclic_shards, root, names=(1, 2))
    assert metas[0]["resumed_from"] == str(root / "seed1/state_00000010.pt")  # the last step's full state
    for name in (1, 2):
        assert_same_refit(root / f"seed{name}", alone / f"seed{name}")


def test_precision_is_part_of_every_refits_identity(tiny_spec, cyclic_shards, tmp_path, caplog):
    spec = tiny_spec(n_tokens=4 * 64, checkpoint_every=2)
    train_refit(spec, 1, cyclic_shards, tmp_path, quiet())
    with caplog.at_level(logging.WARNING, logger="headstab.training"):
        meta = train_refit(spec, 1, cyclic_shards, tmp_path, quiet(precision="bf16"))
    assert "precision (checkpoint 'fp32', now 'bf16')" in meta["restarted_because"]
    assert meta["training"]["precision"] == "bf16" and meta["final_loss"] < meta["architecture"]["d_vocab"]


def test_a_compiled_loss_trains_the_same_refits(tiny_spec, cyclic_shards, tmp_path, alone, monkeypatch):
    # The eager backend runs the graph TorchDynamo captured with torch's own kernels: the same numbers, so this
    # checks the compiled path (capture, the matmul setting outside it) in seconds, not inductor's code.
    monkeypatch.setattr(loop.torch, "compile", functools.partial(torch.compile, backend="eager"))
    train_job(job_spec(tiny_spec), cyclic_shards, tmp_path / "compiled", compile=True)
    for name in NAMES:
        assert_same_refit(tmp_path / "compiled" / f"seed{name}", alone / f"seed{name}")


TRAIN_AND_LIST_MODULES = """
import json, sys
from pathlib import Path
import headstab.fileio, headstab.joblog  # what workflow/scripts/train.py imports besides
from headstab.plan.spec import spec_from_dict
from headstab.training import TrainingOptions, train_refit

spec, shards, out = json.loads(sys.argv[1])
train_refit(spec_from_dict(spec), 1, shards, Path(out), TrainingOptions(progress=False, device="cpu"))
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("transformer_lens", "transformers"))))
"""


def test_training_never_imports_transformer_lens_or_transformers(tiny_spec, cyclic_shards, tmp_path):
    spec = tiny_spec(n_tokens=2 * 64, snapshot_steps=(1,))
    arguments = json.dumps([spec.to_dict(), [str(p) for p in cyclic_shards], str(tmp_path / "out")])
    result = subprocess.run(
        [sys.executable, "-c", TRAIN_AND_LIST_MODULES, arguments],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out/final.pt").is_file()
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_the_loop_reads_no_tensor_on_the_host_between_log_rows(tiny_spec, cyclic_shards, tmp_path, monkeypatch):
    """A read of a device tensor on the host waits for the device: headstab's loop reads the losses and checks
    the weights only at log rows, checkpoints and snapshots (on a GPU, no synchronisation per step)."""
    done = [0]  # the last finished step: a read during step s is recorded as s - 1
    reads = []
    for name in ("item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__"):
        real = getattr(torch.Tensor, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if f"{os.sep}headstab{os.sep}" in caller:
                reads.append((done[0], _name, Path(caller).name))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    spec = tiny_spec(n_tokens=12 * 64, log_every=5, checkpoint_every=6, snapshot_steps=(3,))
    train_job(spec, cyclic_shards, tmp_path, names=(1, 2), on_step_end=lambda step: done.__setitem__(0, step))
    events = {3, 5, 6, 10, 12}  # snapshot, log rows, checkpoints, the last step
    assert reads and {step for step, _, _ in reads} <= {0} | {event - 1 for event in events} | {12}, reads
    assert {step for step, _, file in reads if file == "loop.py"} == {event - 1 for event in events}


def test_a_shared_data_order_trains_every_refit_on_the_one_fixed_order(tiny_spec, tmp_path):
    """data_order shared: refits 1 and 2 of a stack differ in their initialisation only; refit 1 ends with the
    bits of a refit trained alone with data seed SHARED_DATA_SEED (grid refit "1-0"), not those of its own order."""
    windows = np.random.default_rng(0).integers(0, 32, size=(64, 16))  # every window different: order matters
    shards = write_shards(tmp_path, [windows.ravel()])
    spec = job_spec(tiny_spec, snapshot_steps=())
    metas = train_job(dataclasses.replace(spec, data_order="shared"), shards, tmp_path / "shared", names=(1, 2))
    assert [(meta["init_seed"], meta["data_seed"]) for meta in metas] == [(1, SHARED_DATA_SEED), (2, SHARED_DATA_SEED)]
    assert train_refit(spec, f"1-{SHARED_DATA_SEED}", shards, tmp_path / "grid", quiet())["data_seed"] == 0
    assert states_equal(final_state(tmp_path / "shared/seed1"), final_state(tmp_path / "grid"))
    assert train_refit(spec, 1, shards, tmp_path / "per_seed", quiet())["data_seed"] == 1
    assert not states_equal(final_state(tmp_path / "shared/seed1"), final_state(tmp_path / "per_seed"))


@pytest.fixture
def distinct_windows(tmp_path) -> list[Path]:
    """One shard of 64 windows of 16 random tokens, no two alike: a refit trained on another's order ends elsewhere."""
    windows = np.random.default_rng(7).integers(0, 32, size=(64, 16))
    assert len({row.tobytes() for row in windows}) == len(windows)
    return write_shards(tmp_path, [windows.ravel()])


def test_each_refit_of_a_stack_reads_its_own_windows(tiny_spec, distinct_windows, tmp_path, monkeypatch):
    """On windows that all differ, the stack of 1, 2 and 3-5 equals the three trained alone; the control, the same
    stack with the data orders of refits 1 and 2 swapped, ends apart from both, so the comparison sees the order."""
    spec, names = job_spec(tiny_spec), (1, 2, "3-5")
    for name in names:
        train_refit(spec, name, distinct_windows, tmp_path / "alone" / f"seed{name}", quiet())
    train_job(spec, distinct_windows, tmp_path / "stack", names=names)
    for name in names:
        assert_same_refit(tmp_path / "stack" / f"seed{name}", tmp_path / "alone" / f"seed{name}")

    real_prepare, prepared = loop.prepare_refit, {}

    def swapping_orders(*args, **kwargs):
        refit = real_prepare(*args, **kwargs)
        prepared[refit.name] = refit
        if refit.name == 2:  # refit 1 was prepared first: the two trade their window orders
            prepared[1].order, refit.order = refit.order, prepared[1].order
        return refit

    monkeypatch.setattr(loop, "prepare_refit", swapping_orders)
    train_job(spec, distinct_windows, tmp_path / "swapped", names=names)
    for name in (1, 2):
        swapped, alone = (final_state(tmp_path / run / f"seed{name}") for run in ("swapped", "alone"))
        assert not states_equal(swapped, alone), name
    assert states_equal(final_state(tmp_path / "swapped/seed3-5"), final_state(tmp_path / "alone/seed3-5"))
    # refit 1 on refit 2's order is the grid refit of init seed 1 and data seed 2: the order is all that moved
    train_refit(spec, "1-2", distinct_windows, tmp_path / "grid", quiet())
    assert states_equal(final_state(tmp_path / "swapped/seed1"), final_state(tmp_path / "grid"))


@pytest.mark.parametrize("optimizer, weight_decay", [("adam", 0.0), ("adamw", 0.1)])
def test_adam_is_fused_on_cuda_only(tiny_spec, optimizer, weight_decay):
    spec = tiny_spec(optimizer=optimizer, weight_decay=weight_decay)
    parameters = [torch.nn.Parameter(torch.zeros(3))]
    assert not make_optimizer(spec, parameters, torch.device("cpu")).defaults["fused"]
    # Built, not stepped: torch checks a fused optimizer's parameters' device at its first step.
    assert make_optimizer(spec, parameters, torch.device("cuda")).defaults["fused"] is True
