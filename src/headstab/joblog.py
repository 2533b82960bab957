"""Logging for workflow jobs: everything a job says goes to its rule's `log:` file.

Scripts in workflow/scripts call `run_job(main, rule, log_path)`: stderr (logging, tqdm progress
bars, library warnings) is redirected into the log, a failure leaves its traceback there and a
one-line reason on the console, so `snakemake` output stays readable and nothing is lost.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path


def log_to_file(path: str | Path, append: bool = False) -> None:
    """Send this process's stderr (logging, tqdm, warnings, C-level messages) to `path`, truncated
    first unless `append` (a resumed job keeps the history of the run it continues)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o644), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def run_job(main: Callable[[], None], rule: str, log_path: str | Path, append: bool = False, label: str = "") -> None:
    """Run `main()` with stderr in `log_path` (appended to when `append`); on failure the traceback
    goes to the log and a one-line reason, naming the rule and `label` (e.g. the wildcards), to the
    console, and the process exits with status 1."""
    log_to_file(log_path, append=append)
    started = time.perf_counter()
    logging.info("rule %s started (pid %d, host %s)", rule, os.getpid(), os.uname().nodename)
    try:
        main()
    except Exception as error:
        logging.exception("rule %s failed", rule)
        where = f" ({label})" if label else ""
        print(f"Error in rule {rule}{where}: {error}\n(details: {log_path})", flush=True)
        raise SystemExit(1) from None
    logging.info("rule %s finished in %.1f s", rule, time.perf_counter() - started)
