"""Real Slurm, not a mock: start a single-node cluster and run workflows through sbatch.

Skipped on a developer machine without Slurm (or not root); when the CI environment
variable is set, a cluster that cannot be started is a failure, not a skip.
Install the daemons with tests/slurm/install_slurm.sh (apt-get, as root).

Each WorkflowCase in WORKFLOW_CASES runs once on the cluster (module-scoped fixture);
the generic tests then check its outputs, its Slurm jobs and their GPU requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm.harness import (
    REPO_ROOT,
    SLURM_DIR,
    ClusterStartError,
    SlurmCluster,
    SnakemakeRun,
    missing_slurm_reason,
    requested_gpus,
    run_snakemake_locally,
    run_snakemake_on_slurm,
    running_cluster,
    running_in_ci,
    slurm_job_states,
)

from headstab.plan.layout import GPU_RULES
from headstab.stability import TABLE_NAMES

pytestmark = pytest.mark.slurm


@dataclass(frozen=True)
class WorkflowCase:
    """A workflow to run on the test cluster and what it must produce there."""

    name: str
    snakefile: Path
    configfile: Path | None
    expected_outputs: tuple[str, ...]  # paths relative to the run's working directory
    gpu_rules: frozenset[str]  # rules (or groups) whose jobs must request a GPU; no others may
    extra_args: tuple[str, ...] = ()
    timeout_s: float = 600


SMOKE = WorkflowCase(
    name="smoke",
    snakefile=SLURM_DIR / "Snakefile.smoke",
    configfile=SLURM_DIR / "smoke_config.yaml",
    expected_outputs=("smoke/gpu_probe.txt", "smoke/cpu_probe.txt"),
    gpu_rules=frozenset({"gpu_probe"}),
)
# The real workflow on the tiny configuration (tests/config/tiny.yaml), one architecture's every
# output through its per-architecture target (workflow/rules/targets.smk): data, 2 refits, their
# caches, similarity, tables, figures and the model-running analyses. The tiny config pins the CPU
# (gpu=0 everywhere); here `device: auto` makes the GPU_RULES (train, cache_activations and the two perplexity rules) ask
# for gpu=1 as on a real cluster (no CUDA on the test node, so they still run on its CPU). The test
# node has one GPU, so those jobs queue one after another: the whole DAG of both architectures took
# ~8 min on a loaded 2-core machine, this target ~4. --cores 2 caps a group job at the node's 2 CPUs.
# --directory is the test's workdir, so the prompt files are given by absolute path.
TINY_ARCH = "l2_h4"
TINY = WorkflowCase(
    name="tiny",
    snakefile=REPO_ROOT / "Snakefile",
    configfile=REPO_ROOT / "tests/config/tiny.yaml",
    expected_outputs=tuple(
        [f"results/tiny/{TINY_ARCH}/checkpoints/seed{seed}/final.pt" for seed in (1, 2)]
        + [f"results/tiny/{TINY_ARCH}/caches/seed{seed}.h5" for seed in (1, 2)]
        + [f"results/tiny/{TINY_ARCH}/similarity/{name}.h5" for name in ("primary", "len5", "len10")]
        + [f"results/tiny/{TINY_ARCH}/tables/{name}.csv" for name in ("head_stability", "layer_stability", "ablation")]
        + [f"results/tiny/{TINY_ARCH}/figures/{name}.png" for name in ("head_stability", "weight_norm_correlation")]
    ),
    gpu_rules=frozenset(GPU_RULES) - {"train_seed_grid"},  # the tiny config has no seed_grid architecture
    extra_args=(
        f"arch_{TINY_ARCH}",
        "--cores",
        "2",
        "--config",
        "compute={device: auto}",
        f"prompt_sets={{primary: {REPO_ROOT}/tests/config/prompts_primary.json, "
        f"len: {REPO_ROOT}/tests/config/prompts_length.json}}",
    ),
    timeout_s=900,
)
WORKFLOW_CASES = [SMOKE, TINY]


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node cluster for the whole session; daemons stopped by pid at the end."""
    reason = missing_slurm_reason()
    if reason is not None:
        if running_in_ci():
            pytest.fail(f"CI is set but the real-Slurm test cannot run: {reason}")
        pytest.skip(reason)
    try:
        with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
            yield cluster
    except ClusterStartError as exc:
        if running_in_ci():
            pytest.fail(f"CI is set but the Slurm test cluster did not start:\n{exc}")
        pytest.skip(f"Slurm test cluster did not start (set CI=1 to make this a failure):\n{exc}")


@dataclass(frozen=True)
class CaseRun:
    case: WorkflowCase
    workdir: Path
    run: SnakemakeRun


@pytest.fixture(scope="module", params=WORKFLOW_CASES, ids=lambda case: case.name)
def slurm_run(
    request: pytest.FixtureRequest,
    slurm_cluster: SlurmCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> CaseRun:
    """The case's workflow, run once through `snakemake --profile slurm` on the test cluster."""
    case: WorkflowCase = request.param
    workdir = tmp_path_factory.mktemp(f"on_slurm_{case.name}")
    run = run_snakemake_on_slurm(
        workdir,
        case.snakefile,
        case.configfile,
        case.extra_args,
        cluster=slurm_cluster,
        timeout_s=case.timeout_s,
    )
    return CaseRun(case, workdir, run)


def test_every_job_went_through_sbatch_and_completed(slurm_run: CaseRun, slurm_cluster: SlurmCluster) -> None:
    run = slurm_run.run
    assert run.job_ids, f"no job was submitted to Slurm:\n{run.output[-3000:]}"
    # Slurm's own record, not Snakemake's: each id is a real job that ran to completion.
    assert slurm_job_states(run.job_ids, slurm_cluster) == {job_id: "COMPLETED" for job_id in run.job_ids}
    # The executor kept Slurm's log of each job, named by its job id.
    logs = (slurm_run.workdir / ".snakemake" / "slurm_logs").rglob("*.log")
    assert sorted(int(p.stem) for p in logs) == sorted(run.job_ids)


def test_expected_outputs_exist(slurm_run: CaseRun) -> None:
    missing = [p for p in slurm_run.case.expected_outputs if not (slurm_run.workdir / p).is_file()]
    assert not missing, f"missing after the Slurm run: {missing}"


def test_gpu_rules_and_only_they_requested_a_gpu(slurm_run: CaseRun, slurm_cluster: SlurmCluster) -> None:
    rules_run = set(slurm_run.run.job_rules.values())
    assert slurm_run.case.gpu_rules <= rules_run, "a GPU rule never ran on Slurm"
    for job_id, rule in slurm_run.run.job_rules.items():
        gpus = requested_gpus(job_id, slurm_cluster)
        if rule in slurm_run.case.gpu_rules:
            assert gpus == "gres:gpu:1", f"{rule} (Slurm job {job_id}) requested {gpus!r}"
        else:
            assert gpus == "", f"CPU rule {rule} (Slurm job {job_id}) requested {gpus!r}"


def test_rerun_finds_nothing_to_do(slurm_run: CaseRun, slurm_cluster: SlurmCluster) -> None:
    case = slurm_run.case
    rerun = run_snakemake_on_slurm(
        slurm_run.workdir,
        case.snakefile,
        case.configfile,
        case.extra_args,
        cluster=slurm_cluster,
        timeout_s=case.timeout_s,
    )
    assert rerun.job_ids == []
    assert "Nothing to be done" in rerun.output


def read_probe(path: Path) -> dict[str, str]:
    """`key=value` lines written by the smoke workflow's rules."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.mark.parametrize("slurm_run", [SMOKE], ids=["smoke"], indirect=True)
def test_smoke_jobs_saw_their_slurm_job_and_gpu(slurm_run: CaseRun) -> None:
    gpu = read_probe(slurm_run.workdir / "smoke" / "gpu_probe.txt")
    cpu = read_probe(slurm_run.workdir / "smoke" / "cpu_probe.txt")
    assert {int(gpu["SLURM_JOB_ID"]), int(cpu["SLURM_JOB_ID"])} == set(slurm_run.run.job_ids)
    # The CPU job ran after, and read, the GPU job's output.
    assert cpu["upstream_SLURM_JOB_ID"] == gpu["SLURM_JOB_ID"]
    assert gpu["greeting"] == "hello slurm"
    # gpu=1 became an allocation of the node's one GPU; the CPU job was given none.
    assert gpu["CUDA_VISIBLE_DEVICES"] == "0"
    assert cpu["CUDA_VISIBLE_DEVICES"] == "unset"


def test_local_run_of_the_smoke_workflow_sees_no_slurm(tmp_path: Path) -> None:
    """Contrast for the Slurm tests: without sbatch there is no job id."""
    run = run_snakemake_locally(tmp_path, SMOKE.snakefile, SMOKE.configfile)
    assert run.job_ids == []
    gpu = read_probe(tmp_path / "smoke" / "gpu_probe.txt")
    assert gpu["SLURM_JOB_ID"] == "none"
    assert gpu["greeting"] == "hello slurm"


def refused_smoke_run(cluster: SlurmCluster, tmp_path: Path, resource_args: list[str], partition: str):
    """The smoke workflow submitted with `resource_args` naming `partition`, which Slurm refuses:
    the run fails, no job starts, and Slurm's own message reaches the user. Returns the run."""
    run = run_snakemake_on_slurm(
        tmp_path,
        SMOKE.snakefile,
        SMOKE.configfile,
        resource_args,
        cluster=cluster,
        check=False,
        timeout_s=120,
    )
    assert run.returncode != 0
    assert run.job_ids == []
    assert f"invalid partition specified: {partition}" in run.output, run.output[-3000:]
    return run


def test_unknown_partition_fails_with_slurms_own_message(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    refused_smoke_run(
        slurm_cluster, tmp_path, ["--default-resources", "slurm_partition=no_such_partition"], "no_such_partition"
    )
    assert not (tmp_path / "smoke" / "gpu_probe.txt").exists()


@pytest.mark.parametrize("slurm_run", [TINY], ids=["tiny"], indirect=True)
def test_tiny_on_slurm_matches_a_local_run(slurm_run: CaseRun, tmp_path: Path) -> None:
    """Same weights, caches and stability tables as the local executor (CPU training is deterministic),
    and every refit records the Slurm job that trained it."""
    import json

    import numpy as np
    import pandas as pd
    import torch

    from headstab.activations.reader import open_cache

    results = f"results/tiny/{TINY_ARCH}"
    targets = [f"{results}/tables/head_stability.csv"]  # train -> caches -> similarity -> tables
    local_args = [*targets, *TINY.extra_args[TINY.extra_args.index("--config") :]]
    run_snakemake_locally(tmp_path, TINY.snakefile, TINY.configfile, local_args, timeout_s=900)
    on_slurm, local = slurm_run.workdir / results, tmp_path / results

    train_jobs = {job_id for job_id, rule in slurm_run.run.job_rules.items() if rule == "train"}
    for seed in (1, 2):
        checkpoint = f"checkpoints/seed{seed}"
        meta = json.loads((on_slurm / checkpoint / "meta.json").read_text())
        assert int(meta["environment"]["slurm_job_id"]) in train_jobs
        expected = torch.load(local / checkpoint / "final.pt", weights_only=True)
        found = torch.load(on_slurm / checkpoint / "final.pt", weights_only=True)
        assert expected.keys() == found.keys()
        assert all(torch.equal(expected[key], found[key]) for key in expected), f"seed {seed}: weights differ"
        with open_cache(local / f"caches/seed{seed}.h5") as a, open_cache(on_slurm / f"caches/seed{seed}.h5") as b:
            np.testing.assert_array_equal(a.hook_pattern("primary"), b.hook_pattern("primary"))
    for name in TABLE_NAMES:
        pd.testing.assert_frame_equal(
            pd.read_csv(on_slurm / f"tables/{name}.csv"), pd.read_csv(local / f"tables/{name}.csv"), check_exact=True
        )


def test_unknown_gpu_partition_fails_with_slurms_own_message(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """What HEADSTAB_GPU_PARTITION=<typo> does: the GPU rule's sbatch is refused, nothing runs."""
    run = refused_smoke_run(
        slurm_cluster, tmp_path, ["--set-resources", "gpu_probe:slurm_partition=gpu_typo"], "gpu_typo"
    )
    assert "Error in rule gpu_probe:" in run.output


@pytest.mark.parametrize("slurm_run", [SMOKE], ids=["smoke"], indirect=True)
def test_missing_account_is_reported_and_jobs_still_run(slurm_run: CaseRun) -> None:
    """No account given (and none to guess without accounting): the executor says so and submits without -A."""
    assert "No SLURM account given, trying to guess." in slurm_run.run.output
    assert "Unable to guess SLURM account. Trying to proceed without." in slurm_run.run.output
    assert slurm_run.run.job_ids
