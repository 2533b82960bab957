"""`python -m headstab.provenance`, the command docs/operations.md documents: exit status, tree or JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers.provenance_runs import fake_run

from headstab.provenance.__main__ import main

SRC = Path(__file__).resolve().parents[2] / "src"


def test_cli_json_and_unknown_file(tmp_path, capsys):
    weights = fake_run(tmp_path)
    assert main([str(weights), "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["inputs"][0]["kind"] == "corpus meta"
    assert main([str(tmp_path / "notes.txt")]) == 2
    assert "don't know how to trace" in capsys.readouterr().err


def test_python_dash_m_runs_the_command(tmp_path):
    weights = fake_run(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "headstab.provenance", str(weights), "--verify"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"checkpoint: {weights}") and "<- corpus meta: " in result.stdout
    np.save(tmp_path / "data/toy/shard_000.npy", np.zeros(10, dtype=np.uint16))
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1 and "shard_000.npy  [sha256 mismatch]" in result.stdout
