"""Operations: per-architecture targets, partial reruns, faults a user meets, provenance
chains (the Slurm profile's plan of the full paper: tests/workflow/test_slurm_plan.py).

One tiny run (tests/config/tiny.yaml, the session fixture `tiny_run` of conftest.py) serves every test; tests that damage files
work on a copy of it (mtimes preserved), so they stay independent of each other and of the order.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.workflow_runs import copy_run_with_metadata, snakemake_env

from headstab.fileio import sha256_file, temporary_path
from headstab.plan.layout import ANALYSIS_ROOT_RULES, writer_rule

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests/config/tiny.yaml"
RERUN = "l2_h4"  # the architecture whose analyses are rerun
OTHER = "l2_h4_wd"  # the architecture that must not be touched
# The documented one-liner (docs/operations.md): rerun one architecture's analyses only, by forcing the
# rules that start them from its weights and caches.
ANALYSES_RERUN = ("--forcerun", *ANALYSIS_ROOT_RULES)

pytestmark = pytest.mark.integration


def snakemake(results: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """`snakemake <args> --configfile tiny.yaml --config results_dir=<results>` from the repository root.

    Targets go first in `args`: an option taking several values (--forcerun) swallows what follows it.
    """
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args, "--configfile", str(TINY), "--config", f"results_dir={results}"],
        cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=timeout,
    )  # fmt: skip


def _failure(result: subprocess.CompletedProcess, results: Path) -> str:
    logs = (
        sorted((results / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)[-3:]
        if (results / "logs").exists()
        else []
    )
    tails = "\n".join(f"--- {path}\n{path.read_text()[-1500:]}" for path in logs)
    return f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n{tails}"


def copy_run(results: Path, tmp_path: Path) -> Path:
    """A copy of a finished run with its mtimes (so Snakemake sees it as up to date)."""
    copy = tmp_path / "results"
    shutil.copytree(results, copy, copy_function=shutil.copy2)
    return copy


def file_mtimes(results: Path) -> dict[str, int]:
    """{path relative to results: mtime in ns} of every output (job logs and benchmarks excluded)."""
    return {
        str(path.relative_to(results)): path.stat().st_mtime_ns
        for path in results.rglob("*")
        if path.is_file() and path.relative_to(results).parts[0] not in ("logs", "benchmarks")
    }


def planned_outputs(dry_run_output: str) -> list[str]:
    return [path for line in re.findall(r"^\s*output: (.*)$", dry_run_output, re.M) for path in line.split(", ")]


def planned_rules(dry_run_output: str) -> set[str]:
    return set(re.findall(r"^\s*(?:local)?rule (\w+):$", dry_run_output, re.M))


# ---------------------------------------------------------------- per-architecture targets
@pytest.fixture(scope="module")
def fresh_plan(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, subprocess.CompletedProcess]]:
    """(results, `snakemake <target> -n` into that empty results directory), planned once per target and module."""
    plans: dict[str, tuple[Path, subprocess.CompletedProcess]] = {}

    def plan(target: str) -> tuple[Path, subprocess.CompletedProcess]:
        if target not in plans:
            results = tmp_path_factory.mktemp("plan") / "results"
            plans[target] = (results, snakemake(results, target, "-n"))
        return plans[target]

    return plan


@pytest.mark.parametrize("target", [f"arch_{RERUN}", f"analyses_{RERUN}"])
def test_architecture_targets_plan_only_their_architecture(target: str, fresh_plan) -> None:
    results, result = fresh_plan(target)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = planned_outputs(result.stdout)
    mine = [p for p in outputs if p.startswith(f"{results}/{RERUN}/")]
    # everything else is the shared data stage: tokenizer (and its prompt check), corpora, held-out text
    assert all(p.startswith((f"{results}/{RERUN}/", f"{results}/data/", f"{results}/tokenizers/")) for p in outputs), (
        outputs
    )
    for kind in ("checkpoints", "caches", "similarity", "tables", "figures"):
        assert any(f"/{RERUN}/{kind}/" in p for p in mine), f"{target} builds no {kind}"


def test_analysis_root_rules_are_the_rules_that_start_an_architectures_analyses(fresh_plan) -> None:
    """headstab.plan.layout.ANALYSIS_ROOT_RULES are exactly the rules of analyses_<arch> whose jobs read nothing
    but weights, caches and shared data: forcing them reruns every analysis of the architecture."""
    results, result = fresh_plan(f"analyses_{RERUN}")
    assert result.returncode == 0, result.stderr[-3000:]
    upstream = tuple(f"{results}/{RERUN}/{kind}/" for kind in ("checkpoints", "caches")) + (
        f"{results}/data/",
        f"{results}/tokenizers/",
    )
    # The step-0 and snapshot weights and their caches are model runs: upstream like the trained ones.
    snapshot = re.compile(re.escape(f"{results}/{RERUN}/snapshots/") + r"step\d+/(weights|caches)/")

    def is_upstream(path: str) -> bool:
        return path.startswith(upstream) or bool(snapshot.match(path))

    roots = set()
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:\n)", result.stdout):
        rule = re.match(r"\s*(?:local)?rule (\w+):\n", block)
        outputs = re.search(r"^\s*output: (.*)$", block, re.M)
        if not rule or not outputs or any(is_upstream(p) for p in outputs.group(1).split(", ")):
            continue
        inputs = re.search(r"^\s*input: (.*)$", block, re.M)
        if all(is_upstream(p) for p in (inputs.group(1).split(", ") if inputs else [])):
            roots.add(rule.group(1))
    roots.discard(f"analyses_{RERUN}")
    assert roots == set(ANALYSIS_ROOT_RULES)


def test_the_rule_named_for_a_file_is_the_rule_that_writes_it(tmp_path: Path) -> None:
    """headstab.plan.layout.writer_rule (the rule error messages tell to rerun) agrees with the DAG for every output."""
    results = tmp_path / "results"
    result = snakemake(results, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    named = set()
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:\n)", result.stdout):
        rule = re.match(r"\s*(?:local)?rule (\w+):\n", block)
        outputs = re.search(r"^\s*output: (.*)$", block, re.M)
        if not rule or not outputs:
            continue
        for path in outputs.group(1).split(", "):
            assert writer_rule(path) in (None, rule.group(1)), (path, rule.group(1))
            named.add(writer_rule(path))
    assert named >= {
        "train", "init_weights", "cache_activations", "cache_snapshot_activations", "pair_similarity",
        "prompt_group_similarity", "snapshot_prompt_group_similarity", "tokenize_shard",
        "corpus_meta", "check_prompts", "report_configuration",
    }  # fmt: skip


def test_outputs_a_killed_forced_job_left_missing_are_rebuilt_by_the_next_run(tiny_run: Path, tmp_path: Path) -> None:
    """A job of a forced rerun that fails (killed) loses its outputs (Snakemake deletes them) while the tables
    read from them stay up to date; the next run, with --rerun-incomplete as the profiles set it, plans the
    job again instead of 'Nothing to be done'."""
    results = copy_run(tiny_run, tmp_path)
    killed = [results / RERUN / "similarity", results / RERUN / "snapshots/step0/similarity"]
    for directory in killed:  # what a killed prompt_group_similarity (trained or step 0) leaves
        for path in directory.glob("*.groups.h5"):
            path.unlink()
    for target in ("analyses_" + RERUN, "all"):
        plan = snakemake(results, target, "-n", "--rerun-incomplete")
        assert plan.returncode == 0, plan.stderr[-2000:]
        assert {"prompt_group_similarity", "snapshot_prompt_group_similarity", "stability_tables"} <= planned_rules(
            plan.stdout
        ), plan.stdout[-3000:]


def test_a_block_killed_in_a_forced_rerun_is_redone_by_the_next_snakemake(tiny_run: Path, tmp_path: Path) -> None:
    """`snakemake <final.pt> --forcerun train` and `snakemake <caches/seedN.h5> --forcerun cache_activations`
    (docs/operations.md; a snapshot step's cache block alike): Snakemake deletes the block's record before its job starts, so a job killed then
    leaves the record missing and the published files the old ones (hard links to the files the block had
    written before). Every block record is a target: the next `snakemake`, with --rerun-incomplete as the
    profiles set it or without, runs the three blocks again and publishes their refits anew."""
    results = copy_run_with_metadata(tiny_run, tmp_path / "results")
    (results / RERUN / "checkpoints/blocks/seeds1_2.json").unlink()  # what the killed forced jobs leave
    (results / OTHER / "caches/blocks/seeds1_2.json").unlink()
    (results / OTHER / "snapshots/step0/caches/blocks/seeds1_2.json").unlink()  # cache_snapshot_activations
    plan = snakemake(results, "-n", "--rerun-incomplete")
    assert plan.returncode == 0, plan.stderr[-3000:]
    outputs = set(planned_outputs(plan.stdout))
    assert {
        f"{results}/{RERUN}/checkpoints/blocks/seeds1_2.json",
        *(f"{results}/{RERUN}/checkpoints/seed{seed}/final.pt" for seed in (1, 2)),
        f"{results}/{OTHER}/caches/blocks/seeds1_2.json",
        *(f"{results}/{OTHER}/caches/seed{seed}.h5" for seed in (1, 2)),
        f"{results}/{OTHER}/similarity/primary.h5",
        f"{results}/{OTHER}/snapshots/step0/caches/blocks/seeds1_2.json",
        *(f"{results}/{OTHER}/snapshots/step0/caches/seed{seed}.h5" for seed in (1, 2)),
        f"{results}/{RERUN}/tables/head_stability.csv",
    } <= outputs, plan.stdout[-3000:]
    assert f"{results}/{OTHER}/checkpoints/blocks/seeds1_2.json" not in outputs  # that block was not touched


def test_the_tested_one_liners_are_the_documented_ones() -> None:
    text = (REPO / "docs/operations.md").read_text()
    assert re.search(r"snakemake arch_\w+\n", text)
    assert re.search(rf"snakemake analyses_\w+ {' '.join(ANALYSES_RERUN)}\n", text)


def test_rerunning_one_architectures_analyses_touches_no_weights_caches_or_other_architecture(tiny_run: Path) -> None:
    before = file_mtimes(tiny_run)
    time.sleep(0.05)  # rewritten files get a later mtime even on coarse clocks
    result = snakemake(tiny_run, f"analyses_{RERUN}", *ANALYSES_RERUN, "--cores", "2")
    assert result.returncode == 0, _failure(result, tiny_run)
    after = file_mtimes(tiny_run)
    assert after.keys() == before.keys()
    changed = {path for path in before if after[path] != before[path]}

    untouched = [p for p in before if not p.startswith(f"{RERUN}/")]  # other architecture, data, compare, summary
    untouched += [p for p in before if p.startswith((f"{RERUN}/checkpoints/", f"{RERUN}/caches/"))]
    assert not changed & set(untouched), sorted(changed & set(untouched))
    assert any(p.startswith(f"{RERUN}/checkpoints/") and p.endswith(".pt") for p in untouched)  # final.pt, state_*.pt
    # ... and every analysis output of the architecture was rebuilt
    analyses = [p for p in before if p.startswith((f"{RERUN}/similarity/", f"{RERUN}/tables/", f"{RERUN}/figures/"))]
    assert analyses and set(analyses) <= changed, sorted(set(analyses) - changed)
    console = result.stdout + result.stderr
    assert "rule train:" not in console and "rule cache_activations:" not in console

    # At most the cross-architecture outputs are left to refresh, with a plain `snakemake` (none here:
    # the rerun tables are identical, and Snakemake compares checksums of small inputs, not only mtimes).
    plan = snakemake(tiny_run, "-n")
    assert plan.returncode == 0, plan.stderr[-2000:]
    stale = planned_outputs(plan.stdout)
    assert all(p.startswith((f"{tiny_run}/compare/", f"{tiny_run}/summary/")) for p in stale), stale


# ---------------------------------------------------------------- mistakes caught before training
def test_prompt_longer_than_the_context_fails_before_any_training(tmp_path: Path) -> None:
    """check_prompts tokenizes every prompt set (BOS prepended) before the first train job: an over-long
    prompt fails the run in its data stage, naming the set, file, prompt, length and n_ctx."""
    prompts = json.loads((REPO / "tests/config/prompts_primary.json").read_text())
    prompts.insert(2, " ".join(["the lighthouse keeper climbed the stairs"] * 60))  # hundreds of tokens
    prompt_file = tmp_path / "long_prompts.json"
    prompt_file.write_text(json.dumps(prompts))
    config = yaml.safe_load(TINY.read_text())
    config["prompt_sets"]["primary"] = str(prompt_file)
    config["results_dir"] = str(tmp_path / "results")
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    results = tmp_path / "results"

    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", str(configfile)],
        cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=900,
    )  # fmt: skip
    console = result.stdout + result.stderr
    assert result.returncode != 0
    found = re.search(
        rf"prompt set 'primary' \(file {re.escape(str(prompt_file))}\): prompt 2 has (\d+) tokens \(BOS included "
        r"when prepended\), longer than the model's context n_ctx=128", console,
    )  # fmt: skip
    assert found and int(found.group(1)) > 128, console[-3000:]
    assert "Error in rule check_prompts (tokenizer tiny_bpe, n_ctx 128: architectures l2_h4, l2_h4_wd)" in console
    # Nothing trained (step-0 weights, rebuilt from the seed in seconds, need no prompt and may be there).
    assert not list(results.glob("*/checkpoints/**/final.pt")) and not list(results.rglob("train_log.csv"))
    assert not (results / "logs/train").exists() and "rule train:" not in console


def test_the_prompt_check_never_makes_existing_weights_look_out_of_date(tiny_run: Path, tmp_path: Path) -> None:
    """No rule reads the check's record: rerunning the check (forced here) or making its deleted record again
    plans the check alone, never training or caching."""
    record = tiny_run / "tokenizers/tiny_bpe/prompt_check/n_ctx128.json"
    assert json.loads(record.read_text())["prompt_sets"]["primary"]["n_prompts"] == 6
    plain, forced = snakemake(tiny_run, "-n"), snakemake(tiny_run, "-n", "--forcerun", "check_prompts")
    assert plain.returncode == forced.returncode == 0, forced.stderr[-3000:]
    assert planned_rules(plain.stdout) == set(), plain.stdout[-3000:]
    assert planned_rules(forced.stdout) == {"check_prompts", "all"}, forced.stdout[-3000:]
    # with Snakemake's records: an earlier test may have rerun analyses in tiny_run to the same bytes, which
    # Snakemake's records accept and a copy's bare mtimes would not
    results = copy_run_with_metadata(tiny_run, tmp_path / "results")
    shutil.rmtree(results / "tokenizers/tiny_bpe/prompt_check")
    without_record = snakemake(results, "-n")
    assert without_record.returncode == 0, without_record.stderr[-3000:]
    assert planned_rules(without_record.stdout) == {"check_prompts", "all"}, without_record.stdout[-3000:]


# ---------------------------------------------------------------- one run brings every output up to date
PROMPT_FILES = {"primary": "prompts_primary.json", "len": "prompts_length.json"}


def prompt_file_copies(directory: Path) -> dict[str, str]:
    """Copies of tiny.yaml's prompt files in `directory` (mtimes kept): {path as tiny.yaml gives it: copy},
    the renaming copy_run_with_metadata applies to them."""
    directory.mkdir()
    renamed = {}
    for name in PROMPT_FILES.values():
        shutil.copy2(REPO / "tests/config" / name, directory / name)
        renamed[f"tests/config/{name}"] = str(directory / name)
    return renamed


def test_one_snakemake_after_a_prompt_or_option_edit_brings_every_output_up_to_date(
    tiny_run: Path, tmp_path: Path
) -> None:
    """A finished run, as Snakemake recorded it, with its prompt files in tmp_path. Editing a prompt file in place:
    one `snakemake` reruns the check and every output the caches feed (each rewritten; the primary set's tables
    changed), retrains nothing, and `snakemake -n` then plans nothing. Flipping cache.prepend_bos with a new
    prompt set, or an updated check script with an edited analysis option: the dry run plans the check and every
    job that the change reaches, which an ancient() check before train hid (Snakemake does not look below a job
    that must rerun)."""
    prompts = tmp_path / "prompts"
    results = copy_run_with_metadata(tiny_run, tmp_path / "results", prompt_file_copies(prompts))
    config = {**yaml.safe_load(TINY.read_text()), "results_dir": str(results)}
    config["prompt_sets"] = {key: str(prompts / name) for key, name in PROMPT_FILES.items()}
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))  # tiny.yaml's key order: params compare as text

    def run(*args: str, layers: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "snakemake", *args, "--configfile", str(configfile), *map(str, layers)]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=1800)

    # What reads the caches, from the DAG's shape alone: every job below the forced cache rules.
    below = run("-n", "--forcerun", "cache_activations", "cache_snapshot_activations")
    assert below.returncode == 0, below.stderr[-3000:]
    fed = {
        str(file)  # a directory output (the report's pages) stands for its files
        for path in planned_outputs(below.stdout)
        if "/caches/" not in path
        for file in (sorted(Path(path).rglob("*")) if Path(path).is_dir() else [Path(path)])
        if file.is_file()
    }
    fed_tables = {p for p in fed if p.endswith(".csv") and "/tables/" in p}
    assert len(fed_tables) > 20 and f"{results}/{RERUN}/tables/head_stability.csv" in fed_tables, sorted(fed)
    before = file_mtimes(results)
    tables = {path: Path(path).read_bytes() for path in fed_tables}

    primary = json.loads((prompts / PROMPT_FILES["primary"]).read_text())
    primary[0] = "The young lighthouse keeper walked down the stairs each morning and"
    (prompts / PROMPT_FILES["primary"]).write_text(json.dumps(primary))
    once = run("--cores", "2")
    assert once.returncode == 0, _failure(once, results)
    after = file_mtimes(results)
    rewritten = {f"{results}/{path}" for path in after if after[path] != before.get(path)}
    assert fed <= rewritten, sorted(fed - rewritten)
    assert not {path for path in rewritten if "/checkpoints/" in path or "/snapshots/step0/weights/" in path}
    for path in (f"{results}/{arch}/tables/head_stability.csv" for arch in (RERUN,)):
        assert Path(path).read_bytes() != tables[path], path
    record = json.loads((results / "tokenizers/tiny_bpe/prompt_check/n_ctx128.json").read_text())
    assert record["prompt_sets"]["primary"]["prompt_file_sha256"] == sha256_file(prompts / PROMPT_FILES["primary"])
    settled = run("-n")
    assert settled.returncode == 0 and planned_rules(settled.stdout) == set(), settled.stdout[-3000:]

    # cache.prepend_bos flipped and a prompt set added, in a layered partial config as a user would write it
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps(primary[::-1]))
    layered = tmp_path / "layered.yaml"
    layered.write_text(yaml.safe_dump({"cache": {"prepend_bos": False}, "prompt_sets": {"extra": str(extra)}}))
    flipped = run("-n", layers=(layered,))
    assert flipped.returncode == 0, flipped.stderr[-3000:]
    planned = set(planned_outputs(flipped.stdout))
    assert fed_tables <= planned, sorted(fed_tables - planned)
    assert f"{results}/{RERUN}/similarity/extra.h5" in planned and "check_prompts" in planned_rules(flipped.stdout)
    assert not planned_rules(flipped.stdout) & {"train", "init_weights", "publish_refit"}

    # An update of the check's script (its record older than the script) and of an analysis option
    check = results / "tokenizers/tiny_bpe/prompt_check/n_ctx128.json"
    script = (REPO / "workflow/scripts/check_prompts.py").stat().st_mtime
    os.utime(check, (script - 60, script - 60))
    updated = run("-n", "--config", "analysis={meta_sne_perplexity: 4}")
    assert updated.returncode == 0, updated.stderr[-3000:]
    rules = planned_rules(updated.stdout)
    assert {"check_prompts", "meta_sne", "report_configuration"} <= rules, updated.stdout[-3000:]
    assert not rules & {"train", "cache_activations"}


# ---------------------------------------------------------------- inspecting a run
def test_documented_params_check_plans_nothing_after_a_run_and_only_the_jobs_whose_params_changed(
    tiny_run: Path,
) -> None:
    """docs/operations.md: `snakemake -n --rerun-triggers params` (not --list-changes params, which lists
    unchanged outputs in Snakemake 9.27)."""
    text = (REPO / "docs/operations.md").read_text()
    assert "snakemake -n --rerun-triggers params" in text and "snakemake --list-changes" not in text
    clean = snakemake(tiny_run, "-n", "--rerun-triggers", "params")
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert planned_rules(clean.stdout) == set() and "Nothing to be done" in clean.stdout + clean.stderr
    changed = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--rerun-triggers", "params", "--configfile", str(TINY),
         "--config", f"results_dir={tiny_run}", "analysis={meta_sne_perplexity: 4}"],
        cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=300,
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr[-3000:]
    # meta_sne reads the perplexity; report_configuration records the whole configuration; report_summary_tables
    # renders meta_sne's table for the report; `all` collects them
    expected = {"meta_sne", "report_configuration", "report_summary_tables", "all"}
    assert planned_rules(changed.stdout) == expected, changed.stdout[-3000:]
    assert "Params have changed since last execution" in changed.stdout


# ---------------------------------------------------------------- provenance
@pytest.mark.parametrize(
    "output",
    [f"{OTHER}/checkpoints/seed1/final.pt", f"{OTHER}/caches/seed2.h5", f"{OTHER}/similarity/primary.h5",
     f"{OTHER}/tables/head_stability.csv", f"{OTHER}/tables/weight_norms.csv",
     f"{OTHER}/figures/head_stability.png", f"{OTHER}/figures/weight_norm_correlation.png"],
)  # fmt: skip
def test_provenance_chain_reaches_the_corpus_shards(tiny_run: Path, output: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "headstab.provenance", "--verify", "--json", str(tiny_run / output)],
        capture_output=True, text=True, env=snakemake_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    nodes, stack = [], [json.loads(result.stdout)]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node["inputs"])
    assert {node["status"] for node in nodes} == {"ok"}, [
        (n["path"], n["status"]) for n in nodes if n["status"] != "ok"
    ]
    shards = {node["path"] for node in nodes if node["kind"] == "token shard"}
    assert shards == {str(tiny_run / f"data/tiny_text/shard_{i:03d}.npy") for i in range(2)}
    assert nodes[0]["path"] == str(tiny_run / output)
    if output.endswith(".png"):  # checked against its record, traced through the tables its job read
        assert nodes[0]["kind"] == "figure" and {n["kind"] for n in nodes[0]["inputs"]} == {"table"}
    if output.endswith("weight_norms.csv"):  # made from final.pt: traced through the checkpoints, no similarity
        kinds = {node["kind"] for node in nodes}
        assert "checkpoint" in kinds and not kinds & {"pair similarity", "prompt-group similarity", "activation cache"}


# ---------------------------------------------------------------- faults
def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ 0xFF]))


def _verify(path: Path) -> tuple[int, str]:
    """`python -m headstab.provenance <path> --verify`, in this process: (exit status, output)."""
    from headstab.provenance.__main__ import main

    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        status = main([str(path), "--verify"])
    return status, output.getvalue()


def _flip_in_dataset(path: Path, dataset: str) -> None:
    """Flip a byte in the middle of the first chunk of `dataset`, before its 4-byte fletcher32 checksum."""
    import h5py

    with h5py.File(path) as handle:
        info = handle[dataset].id.get_chunk_info(0)
    _flip_byte(path, info.byte_offset + (info.size - 4) // 2)


def _set_attribute(path: Path, key: str, value: object) -> None:
    import h5py

    with h5py.File(path, "a") as handle:
        handle.attrs.modify(key, value)


def _flip_hex_digit(path: Path, record: str) -> None:
    """Change the first hex digit of the sha256 `record` in the text file `path`."""
    text = path.read_text()
    start = text.index(record)
    path.write_text(text[:start] + ("0" if record[0] != "0" else "1") + text[start + 1 :])


def _edit_a_number(path: Path) -> None:
    """Change the first digit after a CSV table's header, as a hand edit would: the table stays valid CSV."""
    text = path.read_text()
    at = next(i for i in range(text.index("\n"), len(text)) if text[i].isdigit())
    path.write_text(text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1 :])


def test_provenance_verify_passes_every_file_of_the_run(tiny_run: Path) -> None:
    """Every file the workflow wrote is a kind provenance knows, and --verify passes each intact one."""
    from headstab.plan.layout import file_kind

    files = sorted(path for path in tiny_run.rglob("*") if path.is_file())
    assert [path for path in files if file_kind(path) is None] == []
    assert {file_kind(path) for path in files} >= {
        "checkpoint", "full-state checkpoint", "snapshot weights", "activation cache", "pair similarity",
        "prompt-group similarity", "token shard", "corpus meta", "corpus text", "tokenizer", "prompt check",
        "table", "table record", "figure", "figure record", "report page", "configuration", "log", "benchmark",
    }  # fmt: skip
    failed = {}
    for path in files:
        status, output = _verify(path)
        if status != 0:
            failed[str(path.relative_to(tiny_run))] = output[-600:]
    assert failed == {}


def test_provenance_verify_fails_a_damaged_file_of_every_kind_naming_it(tiny_run: Path, tmp_path: Path) -> None:
    """A flipped byte or attribute in a copy of each kind of file a record covers: exit 1, the file named."""
    results = copy_run(tiny_run, tmp_path)
    checkpoint = results / OTHER / "checkpoints/seed1"
    state = sorted((checkpoint / "training").glob("state_*.pt"))[-1]  # where the train job keeps its states
    sidecar = state.with_name(state.name + ".sha256")
    data = results / "data/tiny_text"
    shard_record = json.loads((data / "shard_001.json").read_text())["sha256"]
    cache, snapshot_cache = results / RERUN / "caches/seed1.h5", results / RERUN / "snapshots/step0/caches/seed1.h5"
    similarity, groups = results / RERUN / "similarity/primary.h5", results / RERUN / "similarity/len5.groups.h5"
    damaged = {  # path: (damage, what the output says about that path)
        checkpoint / "final.pt": (lambda p: _flip_byte(p, p.stat().st_size // 2), "checkpoint: {}  [sha256 mismatch]"),
        results / RERUN / "checkpoints/seed2/meta.json": (lambda p: _flip_byte(p, 0), "checkpoint meta: {}  [unreadable]"),
        state: (lambda p: _flip_byte(p, p.stat().st_size // 2), "full-state checkpoint: {}  [sha256 mismatch]"),
        sidecar: (lambda p: _flip_hex_digit(p, p.read_text()), "(sidecar={})"),
        results / OTHER / "snapshots/step0/weights/seed2/final.pt": (
            lambda p: _flip_byte(p, p.stat().st_size // 2), "checkpoint: {}  [sha256 mismatch]"),
        cache: (lambda p: _set_attribute(p, "seed", 3), "activation cache: {}  [digest mismatch]"),
        results / OTHER / "caches/seed2.h5": (
            lambda p: _flip_in_dataset(p, "primary/hook_pattern"), "activation cache: {}  [checksum mismatch]"),
        snapshot_cache: (lambda p: _set_attribute(p, "seed", 3), "activation cache: {}  [digest mismatch]"),
        similarity: (lambda p: _set_attribute(p, "promptset", "len5"), "pair similarity: {}  [digest mismatch]"),
        results / OTHER / "similarity/len10.h5": (
            lambda p: _flip_in_dataset(p, "pair_similarity"), "pair similarity: {}  [checksum mismatch]"),
        groups: (lambda p: _set_attribute(p, "promptset", "primary"), "prompt-group similarity: {}  [digest mismatch]"),
        results / OTHER / "similarity/primary.groups.h5": (
            lambda p: _flip_in_dataset(p, "observed"), "prompt-group similarity: {}  [checksum mismatch]"),
        results / OTHER / "similarity/len5.groups.h5": (
            lambda p: _flip_in_dataset(p, "null"), "prompt-group similarity: {}  [checksum mismatch]"),
        results / RERUN / "snapshots/step0/similarity/primary.groups.h5": (
            lambda p: _set_attribute(p, "seed", 7), "prompt-group similarity: {}  [digest mismatch]"),
        data / "shard_000.npy": (lambda p: _flip_byte(p, p.stat().st_size - 1), "token shard: {}  [sha256 mismatch]"),
        data / "shard_001.json": (lambda p: _flip_hex_digit(p, shard_record), "token shard record: {}"),
        data / "meta.json": (lambda p: _flip_hex_digit(p, shard_record), "corpus meta: {}"),
        results / "tokenizers/tiny_bpe/tokenizer.json": (
            lambda p: _flip_byte(p, p.stat().st_size // 2), "tokenizer: {}  [sha256 mismatch]"),
        results / RERUN / "tables/weight_norms.csv": (_edit_a_number, "table: {}  [sha256 mismatch]"),
        results / "summary/tables/weight_norm_correlation.csv": (_edit_a_number, "table: {}  [sha256 mismatch]"),
        results / RERUN / "figures/head_stability.png": (
            lambda p: _flip_byte(p, p.stat().st_size // 2), "figure: {}  [sha256 mismatch]"),
        results / "summary/figures/stability_gap.png": (
            lambda p: _flip_byte(p, p.stat().st_size // 2), "figure: {}  [sha256 mismatch]"),
    }  # fmt: skip
    for path, (damage, _) in damaged.items():
        damage(path)
    for path, (_, expected) in damaged.items():
        status, output = _verify(path)
        assert status == 1 and expected.format(path) in output, (path, output[-1500:])
        assert "[" in output and "mismatch]" in output or "[unreadable]" in output, output


def test_corrupted_checkpoint_is_reported_and_not_used(tiny_run: Path, tmp_path: Path) -> None:
    """docs/operations.md: retraining one refit of a block is `snakemake <its final.pt> --forcerun train`; its newest
    full state fails its sha256, so it trains from step 0, and its block's other refit is only exported again."""
    import torch

    results = copy_run(tiny_run, tmp_path)
    checkpoint = results / OTHER / "checkpoints/seed1"
    original = torch.load(checkpoint / "final.pt", weights_only=True)
    state = sorted((checkpoint / "training").glob("state_*.pt"))[-1]  # the newest full state: what a rerun resumes
    _flip_byte(state, state.stat().st_size // 2)

    result = snakemake(results, str(checkpoint / "final.pt"), "--forcerun", "train", "--cores", "1")
    assert result.returncode == 0, _failure(result, results)
    log = (results / f"logs/train/{OTHER}/seeds1_2.log").read_text()
    assert f"checkpoint {state} fails its sha256 check" in log
    assert f"resuming {OTHER} seed 1" not in log and f"resuming {OTHER} seed 2" in log  # refit 1 trained from scratch
    retrained = torch.load(checkpoint / "final.pt", weights_only=True)
    assert all(torch.equal(original[key], retrained[key]) for key in original)  # ... to the same weights (CPU)


def test_a_tokenizer_and_corpus_rebuilt_as_the_repair_advice_says_retrain_nothing(tmp_path: Path) -> None:
    """`rm -rf DIR && snakemake DIR/meta.json` (load_tokenizer's advice; the same for a corpus) rebuilds the same
    bytes: the next snakemake plans no job below them, and train, forced, resumes each refit at its last step
    (its identity hashes the corpus's content, never when or where it was built). A run of its own: Snakemake
    compares a rebuilt input's checksum with the one it recorded, and a copied run has no records."""
    import torch

    from headstab.data.shards import corpus_content_sha256

    results = tmp_path / "results"
    checkpoint = results / RERUN / "checkpoints/seed1"
    built = snakemake(results, str(checkpoint / "final.pt"), "--cores", "1")
    assert built.returncode == 0, _failure(built, results)
    tokenizer, corpus = results / "tokenizers/tiny_bpe", results / "data/tiny_text"
    records = {path: path.read_bytes() for path in (tokenizer / "meta.json", corpus / "meta.json")}
    state = sorted((checkpoint / "training").glob("state_*.pt"))[-1]
    identity, weights = torch.load(state, weights_only=True)["identity"], (checkpoint / "final.pt").read_bytes()

    shutil.rmtree(tokenizer)
    shutil.rmtree(corpus)
    rebuilt = snakemake(results, str(tokenizer / "meta.json"), str(corpus / "meta.json"), "--cores", "1")
    assert rebuilt.returncode == 0, _failure(rebuilt, results)
    assert {path: path.read_bytes() for path in records} == records  # their environment.json differ
    assert identity["corpus_sha256"] == corpus_content_sha256(json.loads(records[corpus / "meta.json"]))
    plan = snakemake(results, str(checkpoint / "final.pt"), "-n")
    assert plan.returncode == 0 and planned_rules(plan.stdout) == set(), plan.stdout[-3000:]

    forced = snakemake(results, str(checkpoint / "final.pt"), "--forcerun", "train", "--cores", "1")
    assert forced.returncode == 0, _failure(forced, results)
    meta = json.loads((checkpoint / "meta.json").read_text())
    assert (meta["resumed_from"], meta["restarted_because"], meta["identity"]) == (str(state), None, identity)
    assert (checkpoint / "final.pt").read_bytes() == weights


def test_stability_tables_refuse_a_step0_prompt_group_file_of_other_prompts(tiny_run: Path, tmp_path: Path) -> None:
    """The step-0 baseline is compared prompt group by prompt group: len10's step-0 file where len5's belongs (the
    same number of prompts, other prompts) used to change the tables without a word."""
    results = copy_run(tiny_run, tmp_path)
    step0, trained = results / RERUN / "snapshots/step0/similarity", results / RERUN / "similarity"
    shutil.copy2(step0 / "len10.groups.h5", step0 / "len5.groups.h5")
    table = results / RERUN / "tables/head_stability.csv"
    result = snakemake(results, str(table), "--forcerun", "stability_tables", "--cores", "1")
    assert result.returncode != 0 and planned_rules(result.stdout + result.stderr) == {"stability_tables"}
    log = (results / f"logs/stability_tables/{RERUN}.log").read_text()
    assert f"{trained / 'len5.groups.h5'} (prompt_tokens_sha256 " in log, log[-2000:]
    assert f"and {step0 / 'len5.groups.h5'} (" in log and "were computed on other prompts of prompt set 'len5'" in log


@pytest.mark.parametrize(
    ("published", "rule"), [("checkpoints/seed2/final.pt", "publish_refit"), ("caches/seed2.h5", "publish_cache")]
)
def test_a_deleted_published_file_is_linked_again_without_training_or_running_a_model(
    tiny_run: Path, tmp_path: Path, published: str, rule: str
) -> None:
    results = copy_run(tiny_run, tmp_path)
    path = results / OTHER / published
    original = path.read_bytes()
    path.unlink()
    result = snakemake(results, str(path), "--cores", "1")
    assert result.returncode == 0, _failure(result, results)
    assert planned_rules(result.stdout + result.stderr) == {rule}, result.stdout[-3000:]
    assert path.read_bytes() == original


def test_a_cache_written_in_a_block_holds_the_activations_it_holds_written_alone(
    tiny_run: Path, tmp_path: Path
) -> None:
    """tiny.yaml caches each architecture's 2 refits in one job; its seed 2 cached by a job of its own (a block of
    one, forced: a copied run has no Snakemake metadata, so only mtimes would trigger it) holds the same
    activations, bit for bit (CPU)."""
    from headstab.activations.reader import open_cache

    results = copy_run(tiny_run, tmp_path)
    cache = results / OTHER / "caches/seed2.h5"
    with open_cache(cache) as reader:
        sets = reader.prompt_sets()
        in_block = {
            name: (reader.hook_pattern(name), reader.hook_z(name)) for name in sets if reader.stores_activations(name)
        }
    alone = subprocess.run(
        [sys.executable, "-m", "snakemake", str(cache), "--forcerun", "cache_activations", "--cores", "1",
         "--configfile", str(TINY), "--config", f"results_dir={results}",
         "compute={device: cpu, train_threads: 1, cache_threads: 1, cache_refits_per_job: 1}"],
        cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=900,
    )  # fmt: skip
    assert alone.returncode == 0, _failure(alone, results)
    assert "rule cache_activations:" in alone.stdout + alone.stderr and in_block
    assert (results / OTHER / "caches/blocks/seeds2.json").exists()
    with open_cache(cache) as reader:
        for name, (pattern, z) in in_block.items():
            np.testing.assert_array_equal(reader.hook_pattern(name), pattern)
            np.testing.assert_array_equal(reader.hook_z(name), z)


def test_interrupted_cache_write_gives_the_rebuild_command_then_rebuilds_the_same_cache(
    tiny_run: Path, tmp_path: Path
) -> None:
    from headstab.activations.reader import open_cache

    results = copy_run(tiny_run, tmp_path)
    cache = results / OTHER / "caches/seed1.h5"
    with open_cache(cache) as reader:
        patterns = {name: reader.hook_pattern(name) for name in reader.prompt_sets()}
    (written,) = (results / OTHER / "caches/blocks").glob("*/seed1.h5")  # in a run, the same inode (hard link)
    for path in (cache, written):
        os.truncate(path, path.stat().st_size // 2)  # a cache cut short (e.g. copied off a full disk) ...
    leftover = temporary_path(written)
    leftover.write_bytes(b"half an HDF5 file")  # ... and the temporary file of a killed writer

    similarity = results / OTHER / "similarity/primary.h5"
    failed = snakemake(results, str(similarity), "--forcerun", "pair_similarity", "--cores", "1")
    assert failed.returncode != 0
    console = failed.stdout + failed.stderr
    assert f"activation cache {cache} is not a readable HDF5 file" in console, console[-3000:]
    # the printed fix: the block's cache job again (publish_cache alone would link back the same truncated file)
    assert f"snakemake {cache} --forcerun cache_activations" in console
    rebuilt = snakemake(results, str(cache), "--forcerun", "cache_activations", "--cores", "1")
    assert rebuilt.returncode == 0, _failure(rebuilt, results)
    assert not leftover.exists()
    with open_cache(cache) as reader:
        for name, pattern in patterns.items():
            np.testing.assert_array_equal(reader.hook_pattern(name), pattern)
    again = snakemake(results, str(similarity), "--cores", "1")
    assert again.returncode == 0, _failure(again, results)


def test_half_written_similarity_file_names_the_file_and_rebuilds(tiny_run: Path, tmp_path: Path) -> None:
    from headstab.similarity.pairs import read_pair_similarity

    results = copy_run(tiny_run, tmp_path)
    similarity = results / OTHER / "similarity/primary.h5"
    table = results / OTHER / "tables/head_stability.csv"
    expected_similarity, _ = read_pair_similarity(similarity)
    expected_table = pd.read_csv(table)
    os.truncate(similarity, similarity.stat().st_size // 2)

    failed = snakemake(results, str(table), "--forcerun", "stability_tables", "--cores", "1")
    assert failed.returncode != 0
    console = failed.stdout + failed.stderr
    assert (
        f"Error in rule stability_tables: pair-similarity file {similarity} is not a readable HDF5 file" in console
    ), console[-3000:]
    assert f"rm -f {similarity} && snakemake {similarity}" in console

    similarity.unlink()
    rerun = snakemake(results, str(table), "--cores", "1")
    assert rerun.returncode == 0, _failure(rerun, results)
    np.testing.assert_array_equal(read_pair_similarity(similarity)[0], expected_similarity)
    pd.testing.assert_frame_equal(pd.read_csv(table), expected_table)


def test_second_snakemake_on_the_same_directory_gets_the_lock_error_and_loses_nothing(
    tiny_run: Path, tmp_path: Path
) -> None:
    results = copy_run(tiny_run, tmp_path)
    before = file_mtimes(results)
    command = [
        sys.executable, "-m", "snakemake", f"analyses_{OTHER}", "--forcerun", "pair_similarity", "--cores", "1",
        "--configfile", str(TINY), "--config", f"results_dir={results}",
    ]  # fmt: skip
    first_log = tmp_path / "first.log"
    with open(first_log, "w") as log:
        first = subprocess.Popen(
            command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True, env=snakemake_env()
        )
    try:
        deadline = time.monotonic() + 120
        while "rule pair_similarity:" not in first_log.read_text():
            assert first.poll() is None and time.monotonic() < deadline, first_log.read_text()[-3000:]
            time.sleep(0.2)
        second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=300)
        assert first.poll() is None, "the first run ended before the second could collide with it"
    finally:
        first.wait(timeout=600)
    assert second.returncode != 0
    # Which refusal the second process meets depends on timing: the lock, or (once the first has
    # started a job) Snakemake's incomplete-output check, which runs before the lock. Both stop it
    # before it runs anything; docs/operations.md says to wait for the first run in either case.
    locked = (
        "LockException" in second.stderr
        and "Directory cannot be locked" in second.stderr
        and "--unlock" in second.stderr
    )
    incomplete = "IncompleteFilesException" in second.stderr and "incomplete" in second.stderr
    assert locked or incomplete, second.stderr[-3000:]
    assert first.returncode == 0, first_log.read_text()[-3000:]
    assert set(before) <= set(file_mtimes(results)), "a finished output disappeared"
    assert not list(results.rglob("*.tmp"))
