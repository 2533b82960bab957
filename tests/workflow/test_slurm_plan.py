"""The Slurm profile's plan of the full paper (`snakemake -n --profile slurm`): GPU requests, partitions,
runtimes, memory and group jobs. No Slurm is needed for a dry run: the executor plugin submits nothing."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.workflow_runs import REPO, snakemake_env

from headstab.plan.layout import GPU_RULES


def _job_blocks(dry_run_output: str) -> list[tuple[str, dict[str, str], str]]:
    """(rule, resources, wildcards) of every job in a dry run's output, grouped jobs included."""
    jobs = []
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:\n)", dry_run_output):
        match = re.match(r"\s*(?:local)?rule (\w+):\n", block)
        if not match:
            continue
        resources = re.search(r"^\s*resources: (.*)$", block, re.M)
        wildcards = re.search(r"^\s*wildcards: (.*)$", block, re.M)
        pairs = dict(item.split("=", 1) for item in resources.group(1).split(", ")) if resources else {}
        jobs.append((match.group(1), pairs, wildcards.group(1) if wildcards else ""))
    return jobs


def slurm_dry_run(*args: str, **env: str) -> str:
    """`snakemake -n --profile slurm <args>` at the repository root, as a user types it, with `env` added
    (no Slurm is needed for a dry run: the executor plugin submits nothing)."""
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--profile", "slurm", *args],
        cwd=REPO, capture_output=True, text=True, env={**snakemake_env(), **env}, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def paper_plan_on_slurm() -> str:
    """`snakemake -n --profile slurm` at the repository root (the full paper)."""
    return slurm_dry_run()


def test_slurm_plan_of_the_paper_asks_a_gpu_for_every_gpu_rule_and_none_for_cpu_rules(paper_plan_on_slurm: str) -> None:
    jobs = _job_blocks(paper_plan_on_slurm)
    counts = {rule: sum(1 for r, _, _ in jobs if r == rule) for rule in {r for r, _, _ in jobs}}
    # blocks of training.seeds_per_job = 5 refits; the grid's 5 diagonal refits are l2_h8's, its 5 one-ulp twins train
    assert counts["train"] == 24 * 10 + 2 and counts["train_seed_grid"] == 5 and counts["publish_refit"] == 1235
    assert counts["cache_activations"] == 1210 + 25 + 5
    for rule, resources, wildcards in jobs:
        if rule in GPU_RULES:
            assert resources.get("gpu") == "1", (rule, wildcards, resources)
        else:
            assert resources.get("gpu", "0") == "0", (rule, wildcards, resources)


def test_slurm_plan_derives_train_runtime_and_memory_from_the_architecture(paper_plan_on_slurm: str) -> None:
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    compute = config["compute"]
    train = {
        wildcards.split(",")[0].removeprefix("arch="): resources
        for rule, resources, wildcards in _job_blocks(paper_plan_on_slurm)
        if rule == "train"
    }
    tokens = config["corpora"]["c4_code_2b"]["expected_tokens"]  # one epoch of the whole corpus (n_tokens null)
    assert tokens == 1_657_102 * 1_024
    k = config["training"]["seeds_per_job"]  # refits per job: k times one refit's tokens
    for arch, entry in (("l2_h16", "l2"), ("l4_h8_attn", "l4_h8"), ("l8_h16", "l8")):
        rate = compute["train_tokens_per_second"][entry]  # prefix entries of the throughput table
        expected = math.ceil(compute["runtime_margin"] * k * tokens / rate / 60) + 10
        assert int(train[arch]["runtime"]) == expected, arch
    assert [int(train[arch]["runtime"]) for arch in ("l2_h8", "l4_h8", "l8_h8", "gpt2")] == [
        411,
        462,
        569,
        6092,
    ]  # docs/slurm.md
    assert (
        int(train["l2_h8"]["runtime"])
        < int(train["l4_h8"]["runtime"])
        < int(train["l8_h8"]["runtime"])
        < int(train["gpt2"]["runtime"])
    )
    assert int(train["l2_h8"]["mem_mb"]) <= int(train["l8_h16"]["mem_mb"]) < int(train["gpt2"]["mem_mb"])


def test_slurm_plan_groups_each_architectures_small_cpu_jobs(paper_plan_on_slurm: str) -> None:
    profile = yaml.safe_load((REPO / "slurm/config.yaml").read_text())
    assert profile["groups"]["pair_similarity"] == profile["groups"]["stability_tables"]
    group = profile["groups"]["pair_similarity"]
    # one group job per architecture: 26 instead of 26 x 7 similarity jobs plus their tables
    assert paper_plan_on_slurm.count(f"Group job {group} ") == 26


def test_gpu_partition_constraint_and_model_reach_every_job_that_asks_for_a_gpu(tmp_path: Path) -> None:
    """HEADSTAB_GPU_* go to exactly the jobs with gpu=1 (the profile reads GPU_RULES), none to the others."""
    plan = slurm_dry_run(
        "--config", f"results_dir={tmp_path / 'results'}", "run={architectures: [l2_h8, l2_h8_wd]}",
        HEADSTAB_GPU_PARTITION="gpuq", HEADSTAB_GPU_CONSTRAINT="a100", HEADSTAB_GPU_MODEL="h100",
    )  # fmt: skip
    jobs = _job_blocks(plan)
    # train_seed_grid trains only architectures with a seed_grid, which l2_h8 and l2_h8_wd are not
    expected = set(GPU_RULES) - {"train_seed_grid"}
    assert {rule for rule, resources, _ in jobs if resources.get("gpu") == "1"} == expected
    for rule, resources, wildcards in jobs:
        gpu_settings = {key: resources.get(key) for key in ("slurm_partition", "constraint", "gpu_model")}
        if resources.get("gpu") == "1":
            assert gpu_settings == {"slurm_partition": "gpuq", "constraint": "a100", "gpu_model": "h100"}, (
                rule,
                wildcards,
            )
        else:
            assert gpu_settings == dict.fromkeys(gpu_settings), (rule, wildcards, resources)
