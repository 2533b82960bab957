"""Run Snakemake workflows on a real, throwaway single-node Slurm cluster.

The cluster is started and stopped by the shell scripts next to this file
(start_cluster.sh / stop_cluster.sh), which keep all state in one directory and
record the pid of every daemon they start. This module wraps them for pytest and
runs `snakemake --profile slurm` (the repository's profile, resolved from the
repository root exactly as a user types it) with the overrides a cluster without
accounting needs.

Typical use in a test (see tests/workflow/test_slurm.py):

    with running_cluster(tmp_dir / "slurm") as cluster:
        run = run_snakemake_on_slurm(workdir, snakefile, configfile, [], cluster=cluster)
        assert slurm_job_states(run.job_ids, cluster) == {i: "COMPLETED" for i in run.job_ids}
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

SLURM_DIR = Path(__file__).resolve().parent
REPO_ROOT = SLURM_DIR.parent.parent
# Jobs run `python -m snakemake` with the submitting interpreter; rules find tools on PATH.
_REPO_VENV_BIN = REPO_ROOT / ".venv" / "bin"
VENV_BIN = _REPO_VENV_BIN if _REPO_VENV_BIN.is_dir() else Path(sys.executable).parent
REQUIRED_BINARIES = (
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "sinfo",
    "scontrol",
)

# Overrides on top of the `slurm` profile for the test cluster:
# - no slurmdbd there, so no sacct: poll squeue (the cluster keeps finished jobs for
#   MinJobAge=600 s, far longer than one poll interval);
# - poll 1 s after submitting, not 40 s (the plugin then adds 10 s per poll that finds
#   nothing finished, and every level of the DAG waits for the poll that sees its jobs end);
# - keep Slurm's per-job logs, which the tests read;
# - local disk, so outputs appear at once; a failure should fail the test, not retry.
TEST_CLUSTER_ARGS = (
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-keep-successful-logs",
    "--latency-wait",
    "5",
    "--retries",
    "0",
)

# Printed by snakemake-executor-plugin-slurm for every sbatch it runs; the log path
# names the rule (".../slurm_logs/rule_<rule>/...") or group (".../group_<group>/...").
SUBMITTED_RE = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: ([^)]*)\)")
LOG_RULE_RE = re.compile(r"/slurm_logs/(?:rule|group)_([^/]+)/")
# Variables from a real cluster or a surrounding job that would leak into the test cluster.
_FOREIGN_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "HEADSTAB_GPU_")


class ClusterStartError(RuntimeError):
    """The test cluster could not be started; the message carries the daemons' logs."""


@dataclass(frozen=True)
class SlurmCluster:
    """A running test cluster: its state directory and the client environment."""

    state_dir: Path
    slurm_conf: Path
    pids: dict[str, int] = field(default_factory=dict)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for Slurm clients and Snakemake talking to this cluster."""
        env = dict(os.environ if base is None else base)
        for key in list(env):
            if key.startswith(_FOREIGN_ENV_PREFIXES):
                del env[key]
        env["SLURM_CONF"] = str(self.slurm_conf)
        env["PATH"] = _path_with_venv(env.get("PATH", ""))
        return env


@dataclass(frozen=True)
class SnakemakeRun:
    """Outcome of one Snakemake invocation."""

    args: list[str]
    returncode: int
    output: str  # stdout and stderr interleaved
    job_ids: list[int]  # Slurm job ids of the jobs Snakemake submitted, in order
    job_rules: dict[int, str]  # Slurm job id -> rule (or group) name it ran


def _path_with_venv(path: str) -> str:
    # Jobs run `snakemake` (and rules run `python`) inside Slurm; they must find this env.
    return os.pathsep.join([str(VENV_BIN), path, "/usr/sbin", "/sbin"])


def _truthy(value: str | None) -> bool:
    return bool(value) and value.strip().lower() not in ("0", "false", "no", "")


def running_in_ci() -> bool:
    """True when the CI environment variable is set (as GitHub, GitLab and .ci/run do)."""
    return _truthy(os.environ.get("CI"))


def missing_slurm_reason() -> str | None:
    """Why a test cluster cannot be started here, or None when it can be tried."""
    path = _path_with_venv(os.environ.get("PATH", ""))
    missing = [name for name in REQUIRED_BINARIES if shutil.which(name, path=path) is None]
    if missing:
        return (
            f"Slurm/munge not installed (missing: {', '.join(missing)}); "
            "run tests/slurm/install_slurm.sh as root to enable the real-Slurm tests"
        )
    if os.geteuid() != 0:
        return "the single-node test cluster must run as root (slurmd launches jobs as their user)"
    return None


def start_cluster(state_dir: Path, timeout_s: float = 90) -> SlurmCluster:
    """Start munged, slurmctld and slurmd with all state under `state_dir`.

    Returns once the node is idle. Raises ClusterStartError (with the daemons' log
    tails) when it is not; whatever was started has then already been stopped.
    """
    state_dir = Path(state_dir)
    cmd = ["bash", str(SLURM_DIR / "start_cluster.sh"), str(state_dir)]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "PATH": _path_with_venv(os.environ.get("PATH", ""))},
        )
    except subprocess.TimeoutExpired as exc:
        stop_cluster(state_dir)
        raise ClusterStartError(f"{' '.join(cmd)} did not finish in {timeout_s} s") from exc
    if proc.returncode != 0:
        raise ClusterStartError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    pids = {}
    for line in (state_dir / "pids").read_text().splitlines():
        name, pid = line.split()
        pids[name] = int(pid)
    log.info("test cluster up: %s", proc.stdout.strip())
    return SlurmCluster(state_dir, state_dir / "etc" / "slurm.conf", pids)


def stop_cluster(state_dir: Path) -> None:
    """Stop exactly the daemons start_cluster started (pids from `state_dir/pids`)."""
    subprocess.run(["bash", str(SLURM_DIR / "stop_cluster.sh"), str(state_dir)], check=False)


@contextlib.contextmanager
def running_cluster(state_dir: Path) -> Iterator[SlurmCluster]:
    """Start a test cluster and stop its daemons on exit, also after a failure."""
    cluster = start_cluster(state_dir)
    try:
        yield cluster
    finally:
        stop_cluster(state_dir)


def _run(args: list[str], env: dict[str, str], timeout_s: float) -> SnakemakeRun:
    log.info("running %s", " ".join(args))
    try:
        proc = subprocess.run(
            args,
            cwd=REPO_ROOT,
            env=env,
            timeout=timeout_s,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"snakemake did not finish within {timeout_s} s:\n{output[-6000:]}") from exc
    job_rules = {}
    for job_id, slurm_log in SUBMITTED_RE.findall(proc.stdout):
        rule = LOG_RULE_RE.search(slurm_log)
        job_rules[int(job_id)] = rule.group(1) if rule else ""
    return SnakemakeRun(args, proc.returncode, proc.stdout, list(job_rules), job_rules)


def _snakemake_args(workdir: Path, snakefile: Path, configfile: Path | None, extra_args: Sequence[str]) -> list[str]:
    args = [
        str(VENV_BIN / "snakemake"),
        "--snakefile",
        str(Path(snakefile).resolve()),
        "--directory",
        str(Path(workdir).resolve()),
    ]
    if configfile is not None:
        args += ["--configfile", str(Path(configfile).resolve())]
    return args + list(extra_args)


def run_snakemake_on_slurm(
    workdir: Path,
    snakefile: Path,
    configfile: Path | None,
    extra_args: Sequence[str] = (),
    *,
    cluster: SlurmCluster | None = None,
    check: bool = True,
    timeout_s: float = 600,
) -> SnakemakeRun:
    """Run `snakemake --profile slurm` from the repository root, outputs in `workdir`.

    cluster: the test cluster to submit to (its SLURM_CONF, a clean environment and
      TEST_CLUSTER_ARGS are used); None submits to whatever Slurm the current
      environment points at, with the profile unchanged.
    extra_args: appended last, so they override the profile and TEST_CLUSTER_ARGS
      (e.g. a target rule, `--forcerun train`, `--set-resources ...`).
    check: raise AssertionError with the log tail when Snakemake fails.
    """
    args = _snakemake_args(workdir, snakefile, configfile, [])
    args[1:1] = ["--profile", "slurm"]
    if cluster is not None:
        args += TEST_CLUSTER_ARGS
    args += list(extra_args)
    env = cluster.env() if cluster is not None else {**os.environ, "PATH": _path_with_venv(os.environ.get("PATH", ""))}
    run = _run(args, env, timeout_s)
    if check and run.returncode != 0:
        raise AssertionError(f"snakemake on Slurm failed (exit {run.returncode}):\n{run.output[-6000:]}")
    return run


def run_snakemake_locally(
    workdir: Path,
    snakefile: Path,
    configfile: Path | None,
    extra_args: Sequence[str] = (),
    *,
    cores: int = 2,
    check: bool = True,
    timeout_s: float = 600,
) -> SnakemakeRun:
    """Run the same workflow with the local executor, for comparing outputs."""
    args = _snakemake_args(workdir, snakefile, configfile, ["--cores", str(cores), *extra_args])
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV_PREFIXES)}
    env["PATH"] = _path_with_venv(env.get("PATH", ""))
    run = _run(args, env, timeout_s)
    if check and run.returncode != 0:
        raise AssertionError(f"local snakemake failed (exit {run.returncode}):\n{run.output[-6000:]}")
    return run


def slurm_job_states(job_ids: Sequence[int], cluster: SlurmCluster) -> dict[int, str]:
    """Slurm's own record of each job ({job id: state, e.g. 'COMPLETED'}), from squeue.

    Finished jobs stay visible for MinJobAge (600 s on the test cluster).
    """
    if not job_ids:
        return {}
    proc = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--jobs", ",".join(map(str, job_ids)), "--format=%i %T"],
        capture_output=True,
        text=True,
        env=cluster.env(),
        check=True,
    )
    states = {}
    for line in proc.stdout.splitlines():
        job_id, state = line.split()
        states[int(job_id)] = state
    return states


def requested_gpus(job_id: int, cluster: SlurmCluster) -> str:
    """The GPU request Slurm recorded for a job ('gres:gpu:1'), or '' when it asked for none.

    `--gpus=N` shows up as TresPerJob, `--gres=gpu:N` as TresPerNode.
    """
    fields = slurm_job_fields(job_id, cluster)
    requests = [fields.get(key, "") for key in ("TresPerJob", "TresPerNode", "TresPerTask")]
    return ",".join(r for r in requests if "gpu" in r)


def slurm_job_fields(job_id: int, cluster: SlurmCluster) -> dict[str, str]:
    """`scontrol show job` as a dict, e.g. {'JobState': 'COMPLETED', 'TresPerJob': 'gres:gpu:1'}.

    Fields Slurm leaves unset (such as TresPerJob of a job without GPUs) are absent.
    """
    proc = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", str(job_id)],
        capture_output=True,
        text=True,
        env=cluster.env(),
        check=True,
    )
    fields = {}
    for token in proc.stdout.split():
        name, sep, value = token.partition("=")
        if sep:
            fields[name] = value
    return fields
