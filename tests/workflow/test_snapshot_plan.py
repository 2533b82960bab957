"""Dry runs of the snapshots along training: what the demo plans, and what snapshot_steps changes."""

from __future__ import annotations

import re

import yaml
from helpers.workflow_runs import job_counts, run_snakemake

from headstab.plan.config import architecture_spec, load_config, validate_config
from headstab.plan.jobs import job_spec
from workflow.test_plan import REPO, _dry_run


def test_the_demo_plans_step_0_for_every_refit_and_step_320_for_l2_h8_attn():
    result = _dry_run("--configfile", "config/demo.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    # 4 architectures x 4 seeds at step 0 (statistics.init_baseline); l2_h8_attn also at step 320.
    assert counts["init_weights"] == 16 and counts["snapshot_weights"] == 4
    # one cache job per architecture and step (compute.cache_refits_per_job: 6), one link per refit
    assert counts["cache_snapshot_activations"] == 4 + 1 and counts["publish_snapshot_cache"] == 16 + 4
    assert counts["snapshot_prompt_group_similarity"] == 4 + 1 and counts["stability_along_training"] == 1
    # snapshots add no training job; the seed grid's 6 refits and 3 one-ulp twins are published too
    assert counts["train"] == 4 and counts["publish_refit"] == 16 + 6 + 3


def test_snapshot_steps_change_the_train_params_of_their_architecture_only():
    config = load_config(REPO / "config/demo.yaml")
    with_steps, without = architecture_spec(config, "l2_h8_attn"), architecture_spec(config, "l2_h8")
    assert with_steps.snapshot_steps == (0, 320) and job_spec(with_steps)["snapshot_steps"] == [0, 320]
    plain = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    plain["architectures"]["l2_h8_attn"].pop("snapshot_steps")
    unchanged = architecture_spec(validate_config(plain), "l2_h8_attn")
    assert "snapshot_steps" not in job_spec(unchanged) and job_spec(without).keys() == job_spec(unchanged).keys()
    assert {k: v for k, v in job_spec(with_steps).items() if k != "snapshot_steps"} == job_spec(unchanged)


def test_a_negative_snapshot_step_fails_naming_the_key(tmp_path):
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["architectures"]["l4_h8_attn"]["snapshot_steps"] = [0, -5]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = _dry_run("--configfile", str(path))
    assert result.returncode != 0 and "architectures.l4_h8_attn.snapshot_steps.1" in result.stdout + result.stderr


def _dag_edges(*args: str) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """({node id: its rule}, {(from, to)}) of `snakemake --dag`."""
    result = run_snakemake("--configfile", "config/demo.yaml", "--dag", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    nodes = dict(re.findall(r"^\s*(\d+)\[label = \"(\w+)", result.stdout, re.M))
    return nodes, set(re.findall(r"^\s*(\d+) -> (\d+)", result.stdout, re.M))


def test_residual_cka_reads_the_step_0_caches_of_its_refits_unless_the_baseline_is_off():
    target = "results/demo/l2_h8/tables/residual_cka.csv"
    nodes, edges = _dag_edges("--", target)
    (cka,) = [node for node, rule in nodes.items() if rule == "residual_cka"]
    step0 = {node for node, rule in nodes.items() if rule == "publish_snapshot_cache"}
    assert len(step0) == 4 and {(node, cka) for node in step0} <= edges  # every refit's step-0 cache
    (job,) = [node for node, rule in nodes.items() if rule == "cache_snapshot_activations"]  # one job caches all 4
    assert {(job, node) for node in step0} <= edges
    nodes, edges = _dag_edges("--config", "statistics={init_baseline: false}", "--", target)
    assert "cache_snapshot_activations" not in nodes.values()
