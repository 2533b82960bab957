"""Tests for headstab.joblog: job output goes to the rule's log, failures name the rule and the log."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def run_job_in_child(log_path: Path, message: str, append: bool, fail: bool = False) -> subprocess.CompletedProcess:
    # run_job redirects file descriptor 2 of its process, so it runs in a child, not in pytest.
    code = textwrap.dedent(f"""
        import logging, sys
        sys.path.insert(0, {str(SRC)!r})
        from headstab.joblog import run_job
        def main():
            logging.info({message!r})
            if {fail!r}:
                raise RuntimeError("boom")
        run_job(main, "train", {str(log_path)!r}, append={append!r}, label="l2_h8 seed 3")
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_append_keeps_the_earlier_run_and_truncate_does_not(tmp_path):
    log_path = tmp_path / "logs" / "train.log"
    assert run_job_in_child(log_path, "first run", append=True).returncode == 0
    assert run_job_in_child(log_path, "resumed run", append=True).returncode == 0
    text = log_path.read_text()
    assert "first run" in text and "resumed run" in text and text.count("rule train finished in") == 2
    assert run_job_in_child(log_path, "fresh run", append=False).returncode == 0
    text = log_path.read_text()
    assert "fresh run" in text and "first run" not in text


def test_failure_names_rule_label_and_log_and_keeps_the_traceback(tmp_path):
    log_path = tmp_path / "train.log"
    result = run_job_in_child(log_path, "working", append=True, fail=True)
    assert result.returncode == 1
    assert f"Error in rule train (l2_h8 seed 3): boom\n(details: {log_path})" in result.stdout
    text = log_path.read_text()
    assert "working" in text and "Traceback" in text and "RuntimeError: boom" in text
