"""`python -m headstab.status`: counts from files, failed jobs from Snakemake's logs, incomplete markers;
on the paper plan (fast) and on the tiny configuration, finished and stopped part-way by a failed job."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import h5py
import pytest
from conftest import TINY_CONFIG, tiny_snakemake
from helpers.workflow_runs import snakemake_env

from headstab.dry_run import PlannedJob, parse_dry_run, short_reason
from headstab.fileio import sha256_file
from headstab.plan.config import architecture_spec, load_config
from headstab.plan.jobs import job_spec
from headstab.snakemake_records import failed_jobs, incomplete_outputs, parse_failures
from headstab.status import format_table, run_status

REPO = Path(__file__).resolve().parents[1]

# A record as Snakemake 9 writes it (slurm executor adds external_jobid), between two other lines.
LOG = """\
[Mon Nov 23 00:34:28 2026]
Error in rule cache_activations:
    message: None
    jobid: 7
    input: {r}/l2_h4/checkpoints/seed2/final.pt
    output: {r}/l2_h4/caches/seed2.h5
    log: {r}/logs/cache_activations/l2_h4/seed2.log (check log file(s) for error details)
    wildcards: arch=l2_h4, seed=2
[Mon Nov 23 00:34:29 2026]
Finished jobid: 15 (Rule: tokenize_shard)
"""


def status_command(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "headstab.status", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=60)


def test_a_failure_record_gives_rule_time_wildcards_log_and_outputs():
    (job,) = parse_failures(LOG.format(r="res"), "x.snakemake.log")
    assert (job.rule, job.when, job.wildcards) == (
        "cache_activations",
        "Mon Nov 23 00:34:28 2026",
        "arch=l2_h4, seed=2",
    )
    assert job.log == ["res/logs/cache_activations/l2_h4/seed2.log"] and job.output == ["res/l2_h4/caches/seed2.h5"]


def test_failed_jobs_are_those_of_this_results_dir_whose_outputs_are_still_missing(tmp_path):
    (tmp_path / ".snakemake/log").mkdir(parents=True)
    results, other = tmp_path / "results", tmp_path / "other"
    (tmp_path / ".snakemake/log/2026-11-23T003428.snakemake.log").write_text(
        LOG.format(r=results) + LOG.format(r=other)
    )
    assert [job.rule for job in failed_jobs(tmp_path / ".snakemake", str(results))] == ["cache_activations"]
    (results / "l2_h4/caches").mkdir(parents=True)
    (results / "l2_h4/caches/seed2.h5").touch()  # a later run made it
    assert failed_jobs(tmp_path / ".snakemake", str(results)) == []


def test_incomplete_markers_are_decoded_as_snakemake_encodes_them(tmp_path):
    from snakemake.persistence.file import FilePersistence

    marked = [str(tmp_path / "results/l2_h4/caches/seed1.h5"), str(tmp_path / ("results/" + "x" * 120 + ".h5"))]
    for path in [*marked, str(tmp_path / "elsewhere.h5")]:
        # max_len 40: the long name is split into '@' directories, as on a file system with short names
        record = Path(FilePersistence._record_path(SimpleNamespace(_fetch_max_len=lambda _: 40), "", path))
        (tmp_path / ".snakemake/incomplete" / record).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / ".snakemake/incomplete" / record).touch()
    assert incomplete_outputs(tmp_path / ".snakemake", str(tmp_path / "results")) == sorted(marked)


def tiny_config(tmp_path):
    config = load_config(TINY_CONFIG)
    config["results_dir"] = str(tmp_path / "results")
    return config


def write_refit(config, arch, seed, meta_seed=None, **changed):
    """final.pt and the meta.json training writes for it: seed, architecture (the config's, with `changed`
    fields), the weights' sha256."""
    checkpoint = Path(config["results_dir"]) / arch / f"checkpoints/seed{seed}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "final.pt").write_bytes(b"weights of " + str(seed).encode())
    architecture = {**job_spec(architecture_spec(config, arch)), "seeds": [seed], **changed}
    meta = {"seed": seed if meta_seed is None else meta_seed, "architecture": architecture}
    (checkpoint / "meta.json").write_text(
        json.dumps({**meta, "final_weights_sha256": sha256_file(checkpoint / "final.pt")})
    )
    return checkpoint / "final.pt"


def test_counts_read_weights_meta_seed_cache_completeness_and_similarity_seeds(tmp_path):
    config = tiny_config(tmp_path)
    results = tmp_path / "results/l2_h4"
    write_refit(config, "l2_h4", 1)
    write_refit(config, "l2_h4", 2, meta_seed=3)  # seed 2's meta.json names another refit: not trained
    (results / "caches").mkdir()
    for seed, complete in ((1, True), (2, False)):
        with h5py.File(results / f"caches/seed{seed}.h5", "w") as handle:
            handle.attrs["complete"] = complete
    (results / "similarity").mkdir()
    with h5py.File(results / "similarity/primary.h5", "w") as handle:
        handle.attrs.update(seeds=[1, 2], complete=True)
    status = run_status(config, tmp_path)
    first = status.architectures[0]
    assert (first.name, first.refits, first.trained, first.cached, first.analysed) == ("l2_h4", 2, 1, 1, 2)
    assert (status.architectures[1].trained, status.failed, status.incomplete) == (0, [], [])
    assert (first.stale, first.corrupt, status.refit_problems, status.report) == (0, 0, [], None)


def test_weights_failing_their_sha256_count_as_corrupt_not_trained(tmp_path):
    config = tiny_config(tmp_path)
    weights = write_refit(config, "l2_h4", 1)
    write_refit(config, "l2_h4", 2)
    weights.write_bytes(b"weights of 9")  # one byte flipped on disk
    status = run_status(config, tmp_path)
    first = status.architectures[0]
    assert (first.trained, first.stale, first.corrupt) == (1, 0, 1)
    (problem,) = status.refit_problems
    assert (problem.weights, problem.problem) == (str(weights), "corrupt")
    assert problem.why.startswith(f"its sha256 is {sha256_file(weights)}, {weights.parent / 'meta.json'} records ")
    table = format_table(status)
    assert f"corrupt {weights}: its sha256 is" in table and f"`rm -f {weights} && snakemake {weights}`" in table
    unverified = run_status(config, tmp_path, verify=False).architectures[0]  # --no-verify: not hashed
    assert (unverified.trained, unverified.corrupt) == (2, 0)


def test_a_refit_is_stale_when_the_dry_run_retrains_it_and_unrecorded_when_it_differs_unseen_by_snakemake(tmp_path):
    """Stale is Snakemake's word: a refit whose block's train job the dry run plans, with its reason, whatever
    its meta.json says; weights trained with another configuration that Snakemake does not retrain (no record
    of what made them) are unrecorded, with the command that retrains them."""
    config = tiny_config(tmp_path)
    write_refit(config, "l2_h4", 1)
    weights = write_refit(config, "l2_h4", 2, lr=1e-3, snapshot_steps=[0, 8])  # the config now: lr 3e-3, none
    differing = "trained with lr 0.001 (config now 0.003); snapshot_steps [0, 8] (config now None)"
    unseen = run_status(config, tmp_path, planned=[])  # the dry run plans nothing
    first = unseen.architectures[0]
    assert (first.trained, first.stale, first.unrecorded, first.corrupt) == (1, 0, 1, 0)
    (problem,) = unseen.refit_problems
    assert (problem.weights, problem.problem, problem.why) == (str(weights), "unrecorded", differing)
    table = format_table(unseen)
    assert f"unrecorded {weights}: {differing}; Snakemake does not retrain it" in table
    assert f"`snakemake {weights} --forcerun train`" in table
    assert "next snakemake (snakemake -n): nothing to be done" in table

    record = str(tmp_path / "results/l2_h4/checkpoints/blocks/seeds1_2.json")
    other = str(tmp_path / "results/l2_h4_wd/checkpoints/blocks/seeds1_2.json")
    planned = [
        PlannedJob("train", [record], "Params have changed since last execution", "arch=l2_h4, block=seeds1_2"),
        PlannedJob("publish_refit", [str(weights)], "Input files updated by another job", "arch=l2_h4, seed=2"),
        PlannedJob("all", [], "Input files updated by another job", ""),
    ]
    retrained = run_status(config, tmp_path, planned=planned)
    first, other_arch = retrained.architectures
    assert (first.trained, first.stale, first.unrecorded) == (0, 2, 0)  # both refits of the block
    assert (other_arch.trained, other_arch.stale) == (0, 0)  # no weights: missing, whatever the plan says
    problems = {Path(p.weights).parent.name: (p.problem, p.why) for p in retrained.refit_problems}
    assert problems == {
        "seed1": ("stale", "Snakemake: Params have changed since last execution"),
        "seed2": ("stale", f"{differing}; Snakemake: Params have changed since last execution"),
    }
    table = format_table(retrained)
    assert "the next snakemake retrains it" in table and "next snakemake (snakemake -n): 2 jobs" in table
    assert "  train x1: e.g. (arch=l2_h4, block=seeds1_2) Params have changed since last execution" in table
    assert other not in table
    assert run_status(config, tmp_path).refit_problems[0].problem == "differs"  # --no-plan: no verdict


def test_a_dry_run_is_read_job_by_job():
    text = """Building DAG of jobs...
Job stats:
job          count
---------  -------
all              1
train            1
total            2

[Sat Nov 28 08:00:00 2026]
rule train:
    input: r/data/tiny_text/shard_000.npy, r/tokenizers/tiny_bpe/meta.json
    output: r/l2_h4/checkpoints/blocks/seeds1_2.json
    log: r/logs/train/l2_h4/seeds1_2.log
    jobid: 3
    reason: Params have changed since last execution: precision
    wildcards: arch=l2_h4, block=seeds1_2
    resources: tmpdir=/tmp, gpu=0

[Sat Nov 28 08:00:00 2026]
localrule all:
    input: r/l2_h4/checkpoints/blocks/seeds1_2.json
    jobid: 0
    reason: Input files updated by another job: r/l2_h4/checkpoints/blocks/seeds1_2.json
    resources: tmpdir=/tmp
Job stats:
"""
    train, everything = parse_dry_run(text)
    assert train == PlannedJob(
        "train",
        ["r/l2_h4/checkpoints/blocks/seeds1_2.json"],
        "Params have changed since last execution: precision",
        "arch=l2_h4, block=seeds1_2",
    )
    assert (everything.rule, everything.output, everything.wildcards) == ("all", [], "")
    long = "Params have changed since last execution: before: {" + "'k': 1, " * 100 + "} now: {}"
    short = short_reason(f"Missing output files: r/a.json; {long}", width=40)
    assert (
        short
        == "Missing output files: r/a.json; Params have changed since last execution: before: {'k': 1, 'k': 1, 'k': 1, 'k':..."
    )


def test_an_empty_or_cut_short_report_is_flagged_with_the_command_that_writes_it_whole(tmp_path):
    config = tiny_config(tmp_path)
    report = tmp_path / "results/report.html"
    report.parent.mkdir(parents=True)
    for content, what in ((b"", "is empty"), (b"<html><body>" + b"x" * 500, "is cut short (512 bytes")):
        report.write_bytes(content)
        problem = run_status(config, tmp_path).report
        assert problem.startswith(f"{report} {what}") and "a `snakemake --report` was killed" in problem
        assert problem.endswith(f"&& mv {report.with_name('.report.tmp.html')} {report}` (with the run's --configfile)")
        assert f"report: {problem}" in format_table(run_status(config, tmp_path))
    report.write_bytes(b"<html><body></body>\n\n</html>\n")
    assert run_status(config, tmp_path).report is None


def test_the_paper_plan_status_as_a_table_and_as_json():
    table = status_command("--no-plan")  # the paper plan's dry run takes a minute
    assert table.returncode == 0, table.stderr
    total = next(line for line in table.stdout.splitlines() if line.startswith("total"))
    # 24 x 50 + 2 x 5 paper refits, the 5 x 5 seed grid and the one-ulp twins of its 5 diagonal cells
    assert total.split()[1] == "1240"
    as_json = json.loads(status_command("--json", "--no-plan").stdout)
    assert len(as_json["architectures"]) == 27 and sum(a["refits"] for a in as_json["architectures"]) == 1240


def test_a_missing_config_file_is_named():
    result = status_command("--configfile", "config/nothere.yaml")
    assert result.returncode == 2 and "config file config/nothere.yaml does not exist" in result.stderr


@pytest.mark.integration
def test_status_of_the_finished_tiny_run(tiny_run):
    result = status_command("--configfile", str(TINY_CONFIG), "--results-dir", str(tiny_run), "--json")
    status = json.loads(result.stdout)
    for arch in status["architectures"]:
        assert (arch["refits"], arch["trained"], arch["cached"], arch["analysed"]) == (2, 2, 2, 2), arch
        assert (arch["stale"], arch["unrecorded"], arch["corrupt"]) == (0, 0, 0), arch
        assert arch["tables"] > 0 and arch["figures"] > 0
    assert status["failed"] == [] and status["incomplete"] == [] and status["refit_problems"] == []
    assert status["planned"] == [] and status["plan_error"] is None  # Snakemake: nothing to be done


@pytest.mark.integration
def test_status_of_a_tiny_run_stopped_by_a_failed_job(tiny_run, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tiny_run, results, copy_function=shutil.copy2)
    shutil.rmtree(results / "l2_h4_wd/similarity")
    (results / "l2_h4_wd/caches/seed2.h5").write_bytes(b"not a cache")  # pair_similarity fails on it
    target = str(results / "l2_h4_wd/similarity/primary.h5")
    run = tiny_snakemake(results, target, "--cores", "1")
    assert run.returncode != 0 and "Error in rule pair_similarity" in run.stderr
    result = status_command("--configfile", str(TINY_CONFIG), "--results-dir", str(results), "--no-plan")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:4]}
    assert (
        rows
        == {  # refits, trained, stale, unrecorded, corrupt, cached, analysed
            "l2_h4": ["2", "2", "0", "0", "0", "2", "2", *rows["l2_h4"][7:]],
            "l2_h4_wd": ["2", "2", "0", "0", "0", "1", "0", *rows["l2_h4_wd"][7:]],
        }
    )
    assert "next snakemake: not asked (--no-plan)" in result.stdout
    assert "failed jobs (outputs still missing): 1" in result.stdout
    assert (
        "pair_similarity at " in result.stdout and f"log {results}/logs/pair_similarity/l2_h4_wd.log" in result.stdout
    )


def status_json(capsys, *args: str) -> dict:
    """`python -m headstab.status --json ARGS` in this process (its dry run is the one subprocess), from the
    repository root as Snakemake's working directory."""
    from headstab.status import main

    capsys.readouterr()
    assert main([*args, "--json", "--directory", str(REPO)]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def counts(status: dict) -> dict[str, tuple[int, int, int]]:
    return {a["name"]: (a["trained"], a["stale"], a["unrecorded"]) for a in status["architectures"]}


def planned(status: dict, rule: str) -> set[str]:
    return {path for job in status["planned"] if job["rule"] == rule for path in job["output"]}


@pytest.mark.integration
def test_status_says_what_snakemake_does_over_a_matrix_of_edits(tiny_run, tmp_path, capsys):
    """Each edit of a finished tiny run, with Snakemake's records of it: status's stale refits are those whose
    train job the dry run plans, with Snakemake's reason, and the plan is the dry run's. A precision change in a
    layered partial preset (which status once refused) retrains every refit; a train and a cache block record
    deleted (a forced job killed) plans both blocks and their published files; an edited token shard retrains
    both architectures. In a copy without Snakemake's records, weights trained with another lr are not
    retrained by Snakemake, and status says so (unrecorded) rather than promising a retrain."""
    from helpers.workflow_runs import copy_run_with_metadata

    results = copy_run_with_metadata(tiny_run, tmp_path / "results")
    base = ("--configfile", str(TINY_CONFIG), "--results-dir", str(results))
    preset = tmp_path / "bf16.yaml"
    preset.write_text("training:\n  precision: bf16\n")
    layered = status_json(capsys, "--configfile", str(TINY_CONFIG), str(preset), "--results-dir", str(results))
    assert counts(layered) == {"l2_h4": (0, 2, 0), "l2_h4_wd": (0, 2, 0)}
    for problem in layered["refit_problems"]:  # Snakemake's params clause, cut short: "before: 'fp32' now: 'bf16'"
        assert (
            problem["why"].startswith("Snakemake: Params have changed since last execution: ")
            and "'bf16'" in problem["why"]
        )
    assert len(planned(layered, "train")) == 2 and len(planned(layered, "cache_activations")) == 2

    (results / "l2_h4/checkpoints/blocks/seeds1_2.json").unlink()
    (results / "l2_h4_wd/caches/blocks/seeds1_2.json").unlink()
    killed = status_json(capsys, *base)
    assert counts(killed) == {"l2_h4": (0, 2, 0), "l2_h4_wd": (2, 0, 0)}
    assert planned(killed, "train") == {str(results / "l2_h4/checkpoints/blocks/seeds1_2.json")}
    assert planned(killed, "publish_cache") >= {str(results / f"l2_h4_wd/caches/seed{s}.h5") for s in (1, 2)}
    assert all(p["why"].startswith("Snakemake: Missing output files") for p in killed["refit_problems"])

    shard = results / "data/tiny_text/shard_000.npy"
    shard.write_bytes(shard.read_bytes()[:-2] + b"\x01\x00")  # the last token id changed
    edited = status_json(capsys, *base)
    assert counts(edited) == {"l2_h4": (0, 2, 0), "l2_h4_wd": (0, 2, 0)}
    assert len(planned(edited, "train")) == 2
    assert all(
        f"Updated input files: {shard}" in p["why"] for p in edited["refit_problems"] if "l2_h4_wd" in p["weights"]
    )

    copied = tmp_path / "copied"
    shutil.copytree(tiny_run, copied, copy_function=shutil.copy2)  # dates only: no records of what made it
    other_lr = "architectures={l2_h4: {n_layers: 2, n_heads: 4, lr: 0.001}}"
    plain = status_json(capsys, "--configfile", str(TINY_CONFIG), "--results-dir", str(copied), "--config", other_lr)
    assert plain["planned"] == [] and counts(plain) == {"l2_h4": (0, 0, 2), "l2_h4_wd": (2, 0, 0)}
    assert {p["problem"] for p in plain["refit_problems"]} == {"unrecorded"}
    assert all(p["why"] == "trained with lr 0.003 (config now 0.001)" for p in plain["refit_problems"])
