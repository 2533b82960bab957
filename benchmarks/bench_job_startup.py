"""The wall time of a Snakemake job that does nothing: the start-up every demo job pays before its work.

A temporary Snakefile with `n_jobs` independent `script:` jobs, each of which imports headstab's job
logger and returns (what every workflow script does first), run one at a time; each job's `benchmark:`
file gives its wall seconds, and the key is their median.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import common

SNAKEFILE = """\
rule all:
    input:
        expand("out/{{index}}.txt", index=range({n_jobs})),


rule nothing:
    output:
        "out/{{index}}.txt",
    log:
        "logs/{{index}}.log",
    benchmark:
        "benchmarks/{{index}}.tsv"
    script:
        "nothing.py"
"""
SCRIPT = """\
from pathlib import Path

from headstab.joblog import run_job


def main():
    Path(snakemake.output[0]).write_text("done\\n")


run_job(main, "nothing", snakemake.log[0])
"""


def benchmark_seconds(path: Path) -> float:
    """Wall seconds (`s` column) of one Snakemake benchmark file."""
    header, values = path.read_text().splitlines()[:2]
    return float(dict(zip(header.split("\t"), values.split("\t")))["s"])


def bench_job_startup(n_jobs: int = 8) -> dict[str, Any]:
    """Median wall seconds of `n_jobs` do-nothing script jobs (and every job's seconds)."""
    with tempfile.TemporaryDirectory(prefix="headstab-startup-") as directory:
        work = Path(directory)
        (work / "Snakefile").write_text(SNAKEFILE.format(n_jobs=n_jobs))
        (work / "nothing.py").write_text(SCRIPT)
        env = {**os.environ, "PYTHONPATH": f"{common.REPO / 'src'}:{os.environ.get('PYTHONPATH', '')}",
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}  # fmt: skip
        command = [sys.executable, "-m", "snakemake", "--cores", "1", "--quiet", "all"]
        result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(command)}` in {work} failed:\n{result.stderr[-3000:]}")
        seconds = sorted(benchmark_seconds(work / "benchmarks" / f"{index}.tsv") for index in range(n_jobs))
    return {"job_startup_seconds": statistics.median(seconds), "job_startup_all_seconds": seconds}


if __name__ == "__main__":
    print(bench_job_startup())
