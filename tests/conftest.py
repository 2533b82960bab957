"""Shared test fixtures. Keep them small and generic; stage-specific helpers live in their test files.

tests/ is on sys.path (shared helpers import as `helpers.*`), so tests/statistics has no __init__.py: as a
package it would shadow the standard library's `statistics`, which seaborn imports."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.workflow_runs import snakemake_env

from headstab.plan.spec import ArchitectureSpec

if "PYTEST_XDIST_WORKER" in os.environ:
    # Two workers on two cores: one OpenMP/BLAS thread each (set before torch loads), since a second,
    # spinning thread per worker makes small torch steps many times slower. Snakemake runs inherit it.
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

TINY_ARCHITECTURE: dict[str, Any] = {
    "name": "tiny",
    "n_layers": 2,
    "n_heads": 2,
    "d_model": 16,
    "d_head": 8,
    "d_mlp": 32,
    "n_ctx": 16,
    "d_vocab": 32,
    "act_fn": "gelu",
    "normalization_type": "LN",
    "positional_embedding_type": "standard",
    "init_mode": "gpt2",
    "attn_only": False,
    "tokenizer": "tiny_tokenizer",
    "corpus": "tiny_corpus",
    "optimizer": "adam",
    "weight_decay": 0.0,
    "lr": 1e-2,
    "batch_size": 4,
    "seq_len": 16,
    "epochs": 1,
    "n_tokens": None,
    "checkpoint_every": 4,
    "log_every": 2,
    "divergence_factor": 3.0,
    "seeds": (1, 2),
}


# ---------------------------------------------------------------- the suite on several workers
# `make test` runs pytest-xdist on two workers with the scheduler below: each test module is one unit of
# work (its module fixtures are built once), and the modules that read the session's `tiny_run` are one
# unit between them, so the tiny DAG runs once. The units that run Snakemake end to end go first, so the
# two longest start at once on different workers and the short modules fill in around them.
TINY_RUN_MODULES = ("tests/test_status.py", "tests/workflow/test_integration.py", "tests/workflow/test_operations.py")
LONG_UNITS = (
    "tiny_run",
    "tests/workflow/test_slurm.py",
    "tests/workflow/test_hub_families.py",
    "tests/workflow/test_published.py",
    "tests/workflow/test_plan.py",
    "tests/workflow/test_slurm_plan.py",
    "tests/workflow/test_planted_heads.py",
    "tests/workflow/test_exchangeable_layers.py",
)


def work_unit(nodeid: str) -> str:
    """The unit of work of a test: `tiny_run` for the modules that read it, else its module's path."""
    module = nodeid.split("::", 1)[0]
    return "tiny_run" if module in TINY_RUN_MODULES else module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = sorted(
        {item.nodeid.split("::", 1)[0] for item in items if "tiny_run" in getattr(item, "fixturenames", ())}
        - set(TINY_RUN_MODULES)
    )
    if strays:
        raise pytest.UsageError(
            f"{', '.join(strays)} read the session's tiny_run: add them to TINY_RUN_MODULES in tests/conftest.py, "
            "or the tiny DAG runs once more on another worker"
        )
    rank = {unit: position for position, unit in enumerate(LONG_UNITS)}
    # A stable sort: the long units first, in LONG_UNITS' order; within a unit, the collection's order.
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(LONG_UNITS)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with work_unit as the scope (its --dist loadgroup marks no longer
        reach the node ids under pytest 9)."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the collection's order, long units first
    return ModuleScheduling(config, log)


@pytest.fixture
def tqdm_bars(monkeypatch) -> list[dict]:
    """The options of every tqdm.auto.tqdm bar opened during the test (the bar itself just yields)."""
    bars: list[dict] = []

    def recording_bar(iterable, **options):
        bars.append(options)
        return iter(iterable)

    monkeypatch.setattr("tqdm.auto.tqdm", recording_bar)
    return bars


@pytest.fixture
def one_thread():
    """One torch thread: on a shared 2-core machine a second, spinning OpenMP thread makes small steps ~10x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_spec() -> Callable[..., ArchitectureSpec]:
    """Factory of tiny ArchitectureSpecs (2 layers, 2 heads, d_model 16, n_ctx 16, vocab 32); keywords override fields."""

    def make(**overrides: Any) -> ArchitectureSpec:
        return ArchitectureSpec(**{**TINY_ARCHITECTURE, **overrides})

    return make


# ---------------------------------------------------------------- the tiny workflow run
REPO_ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO_ROOT / "tests/config/tiny.yaml"


def tiny_snakemake(results: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """`snakemake <args> --configfile tests/config/tiny.yaml --config results_dir=<results>` from the repository root.

    Targets go first in `args`: an option taking several values (--forcerun) swallows what follows it.
    """
    env = snakemake_env()
    command = [
        sys.executable,
        "-m",
        "snakemake",
        *args,
        "--configfile",
        str(TINY_CONFIG),
        "--config",
        f"results_dir={results}",
    ]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of the tiny configuration through the whole DAG, shared by the integration tests
    (it is the expensive part of the suite: a few minutes on 2 cores)."""
    results = tmp_path_factory.mktemp("tiny") / "results"
    result = tiny_snakemake(results, "--cores", "2")
    if result.returncode != 0:
        logs = (
            sorted((results / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)[-3:]
            if (results / "logs").exists()
            else []
        )
        tails = "\n".join(f"--- {path}\n{path.read_text()[-1500:]}" for path in logs)
        pytest.fail(f"tiny workflow failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n{tails}")
    return results
