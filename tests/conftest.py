"""Shared test fixtures. Keep them small and generic; stage-specific helpers live in their test files.

tests/ is on sys.path (shared helpers import as `helpers.*`), so tests/statistics has no __init__.py: as a
package it would shadow the standard library's `statistics`, which seaborn imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.workflow_runs import snakemake_env

from headstab.plan.spec import ArchitectureSpec

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
