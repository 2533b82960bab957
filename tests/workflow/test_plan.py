"""Dry runs: the full paper plans 1,210 refits without touching the network; bad configs fail fast."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.workflow_runs import job_counts

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _dry_run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [*SNAKEMAKE, "-n", "--quiet", "rules", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def paper_plan() -> dict[str, int]:
    """{rule: jobs} of `snakemake -n` without --configfile (the full paper, ~8,000 jobs), planned once."""
    result = _dry_run()
    assert result.returncode == 0, result.stderr[-3000:]
    return job_counts(result.stdout + result.stderr)


def test_default_config_is_the_full_paper_and_plans_1210_refits_in_train_jobs_of_5(paper_plan):
    """Without --configfile the Snakefile reads config/config.yaml: one plan of the paper checks both
    (a --configfile on the command line is the path of every other plan in these tests)."""
    assert 'configfile: "config/config.yaml"' in (REPO / "Snakefile").read_text()
    counts = paper_plan
    # 24 architectures x 50 seeds in blocks of 5, gpt2 and gpt2_wd's 5 seeds in one; the seed grid's 20 refits
    # beyond its diagonal (l2_h8's) and the diagonal's 5 one-ulp twins in 5 blocks.
    assert counts.get("train") == 24 * 10 + 2 and counts.get("train_seed_grid") == 5, counts
    assert counts.get("publish_refit") == 24 * 50 + 2 * 5 + 20 + 5 and counts.get("reuse_paper_refit") == 5, counts


def test_one_architecture_with_a_seed_override(tmp_path):
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["run"] = {"architectures": ["l4_h16_wd"], "seeds": [3, 4, 5]}
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(config))
    result = _dry_run("--configfile", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts.get("train") == 1 and counts.get("publish_refit") == 3, counts  # one block of the 3 seeds


def _failing_run(tmp_path: Path, mutate) -> str:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    mutate(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = _dry_run("--configfile", str(path))
    assert result.returncode != 0
    # a bad config fails while the rule files are read, before Snakemake plans a job
    assert "Building DAG of jobs" not in result.stdout + result.stderr
    return result.stdout + result.stderr


def test_unknown_architecture_fails_the_plan_with_valid_names(tmp_path):
    output = _failing_run(tmp_path, lambda c: c["run"].update(architectures=["l2_h8", "l2_h32"]))
    assert "unknown architecture 'l2_h32'" in output and "l2_h8_attn_wd" in output


def test_misspelt_key_fails_the_plan(tmp_path):
    output = _failing_run(tmp_path, lambda c: c.update(prompt_set=c.pop("prompt_sets")))
    assert "did you mean 'prompt_sets'" in output


def test_a_key_given_twice_in_any_config_file_fails_the_plan_naming_file_key_and_lines(tmp_path):
    """Snakemake keeps the last of two equal keys; each --configfile (here a preset after the demo) is re-read."""
    preset = tmp_path / "preset.yaml"
    preset.write_text("analysis:\n  meta_sne_perplexity: 10\n  cka_hook: hook_resid_pre\n  meta_sne_perplexity: 20\n")
    result = _dry_run("--configfile", "config/demo.yaml", str(preset))
    assert result.returncode != 0
    assert (
        f"config file {preset}: key 'analysis.meta_sne_perplexity' is given twice, on line 2 and line 4"
        in result.stdout + result.stderr
    )


def test_a_yaml_alias_bomb_fails_the_plan_with_a_short_message(tmp_path):
    bomb = "".join(f"  - &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]\n" for n in range(1, 9))
    path = tmp_path / "bomb.yaml"
    text = (REPO / "config/demo.yaml").read_text()
    path.write_text(text.replace("  lr: 2.0e-3 ", "  lr:\n  - &a0 [lol, lol, lol, lol]\n" + bomb + "  #", 1))
    result = _dry_run("--configfile", str(path))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and len(output) < 5000, len(output)
    assert f"config file {path}: its aliases (*name) expand to " in output


def test_a_templated_config_file_stops_the_plan_naming_the_key(tmp_path):
    """Snakemake runs a `__use_yte__` file's expressions while it reads the file, before any rule file: headstab can
    only stop the run, at once and loudly (`python -m headstab.check` reads the file without running it)."""
    marker = tmp_path / "ran"
    text = (REPO / "tests/config/tiny.yaml").read_text().replace("results_dir: results/tiny\n", "")
    path = tmp_path / "templated.yaml"
    path.write_text(
        f"__use_yte__: true\n?if __import__('pathlib').Path({str(marker)!r}).touch() is None:\n"
        f"  results_dir: {tmp_path / 'results'}\n{text}"
    )
    result = _dry_run("--configfile", str(path))
    assert marker.exists()  # Snakemake ran it
    assert result.returncode != 0 and "Building DAG of jobs" not in result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert f"Invalid configuration: config file {path}: key '__use_yte__' makes Snakemake run" in output
    assert "python -m headstab.check FILE" in output


@pytest.mark.parametrize("inside_the_checkout", [False, True], ids=["outside", "inside"])
def test_a_templated_profile_stops_the_plan_naming_it(tmp_path, inside_the_checkout):
    """A profile is read by Snakemake before any rule file too (docs/operations.md): the run stops, naming it, also
    when someone's profile is put into the checkout (only the workflow's own two are its code)."""
    marker = tmp_path / "ran"
    # inside: under the checkout's git-ignored results/, so that a killed run leaves nothing for git to see
    profile = (REPO / "results" if inside_the_checkout else tmp_path) / f"theirs_{tmp_path.name}"
    profile.mkdir(parents=True)
    (profile / "config.yaml").write_text(
        f"__use_yte__: true\n?if __import__('pathlib').Path({str(marker)!r}).touch() is None:\n  cores: 1\n"
    )
    try:
        result = _dry_run("--configfile", "tests/config/tiny.yaml", "--profile", str(profile))
    finally:
        if inside_the_checkout:
            shutil.rmtree(profile)
    output = result.stdout + result.stderr
    assert marker.exists()  # Snakemake ran it
    assert result.returncode != 0 and "Building DAG of jobs" not in output, output[-2000:]
    assert f"Invalid configuration: profile {profile / 'config.yaml'}: key '__use_yte__' makes Snakemake run" in output


def test_a_key_given_twice_in_a_config_value_fails_the_plan_naming_it():
    value = "{cka_max_tokens: 100, cka_max_tokens: 50}"  # Snakemake keeps 50 without a word
    result = _dry_run("--configfile", "tests/config/tiny.yaml", "--config", f"analysis={value}")
    assert result.returncode != 0
    assert (
        "Invalid configuration: --config analysis=...: key 'analysis.cka_max_tokens' is given twice, on line 1, at "
        f"columns 2 and {value.rindex('cka') + 1};" in result.stdout + result.stderr
    )


def test_an_alias_bomb_in_a_config_value_fails_the_plan_with_a_short_message():
    anchors = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 7)]
    result = _dry_run("--configfile", "tests/config/tiny.yaml", "--config", f"results_dir=[{', '.join(anchors)}]")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and len(output) < 5000, len(output)
    # a0 holds 10 values, a_n 1 + 9 x a_(n-1): 10 + 91 + 820 + 7,381 + 66,430 + 597,871 + 5,380,840, and the outer list
    assert "Invalid configuration: --config results_dir=...: its aliases (*name) expand to 6,053,444 values" in output


def _rule_blocks(text: str) -> dict[str, str]:
    """{rule name: its text} of every named `rule` in a .smk file."""
    parts = re.split(r"^rule (\w+):\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_gpu_rules_are_exactly_the_rules_that_declare_a_gpu():
    """headstab.plan.layout.GPU_RULES (read by slurm/config.yaml) and the rules' own `gpu=` resources agree."""
    from headstab.plan.layout import GPU_RULES

    declaring = set()
    for path in (REPO / "workflow/rules").glob("*.smk"):
        for name, body in _rule_blocks(path.read_text()).items():
            resources = re.search(r"^    resources:\n((?:        .*\n)+)", body, re.M)
            if resources and re.search(r"^        gpu=", resources.group(1), re.M):
                declaring.add(name)
    for path in (REPO / "workflow/rules").glob("*.smk"):  # `use rule X as Y with:` inherits X's resources
        for parent, name in re.findall(r"^use rule (\w+) as (\w+)", path.read_text(), re.M):
            if parent in declaring:
                declaring.add(name)
    assert declaring == set(GPU_RULES)
    assert "GPU_RULES" in (REPO / "slurm/config.yaml").read_text()


def test_a_script_that_runs_several_rules_names_the_rule_of_its_job():
    """A script shared through `use rule X as Y` reports failures under its job's rule (snakemake.rule), so a
    snapshot's cache job does not say cache_activations."""
    rules = {}
    for path in (REPO / "workflow/rules").glob("*.smk"):
        rules.update(_rule_blocks(path.read_text()))
    shared = set()
    for path in (REPO / "workflow/rules").glob("*.smk"):
        shared |= {parent for parent, _ in re.findall(r"^use rule (\w+) as (\w+)", path.read_text(), re.M)}
    assert shared >= {"cache_activations", "prompt_group_similarity", "train"}
    for parent in shared:
        script = re.search(r'^    script:\n        "\.\./scripts/(\w+\.py)"', rules[parent], re.M)
        if script is None:  # a shell rule (publish_cache): Snakemake's own error names the job's rule
            assert re.search(r"^    shell:", rules[parent], re.M), parent
            continue
        source = (REPO / "workflow/scripts" / script.group(1)).read_text()
        assert re.search(r"run_job\(\s*main,\s*snakemake\.rule,", source), f"{script} names a fixed rule in run_job"


def test_every_rule_writing_an_hdf5_file_carries_its_format_version():
    """A format bump changes these params, so Snakemake rebuilds files older code wrote (headstab.plan.formats)."""
    rules = {}
    for path in (REPO / "workflow/rules").glob("*.smk"):
        rules.update(_rule_blocks(path.read_text()))
    versions = {
        "cache_activations": "CACHE_FORMAT_VERSION",  # and cache_snapshot_activations, which uses it
        "pair_similarity": "SIMILARITY_FORMAT_VERSION",
        "prompt_group_similarity": "GROUPED_FORMAT_VERSION",  # and snapshot_prompt_group_similarity
    }
    for rule, constant in versions.items():
        assert re.search(rf"^        format_version={constant},$", rules[rule], re.M), rule


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_writes_the_report_under_a_temporary_name_and_renames_it():
    """Snakemake writes --report in place: a killed call must not leave a report.html that looks whole."""
    result = subprocess.run(["make", "-n", "demo", "STAMP="], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    written = re.search(r"--report (\S+)", result.stdout).group(1)
    assert written != "results/demo/report.html" and written.endswith(".html")  # Snakemake wants .html or .zip
    assert result.stdout.index(f"mv -f {written} results/demo/report.html") > result.stdout.index("--report")


def _plan(*args: str) -> subprocess.CompletedProcess:
    """`snakemake -n <args>` at the repository root, every job printed with its wildcards and resources."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([*SNAKEMAKE, "-n", *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=300)


def _jobs(output: str) -> list[tuple[str, str, str]]:
    """(rule, wildcards, resources) of every job of a dry run."""
    jobs = []
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:\n)", output):
        match = re.match(r"\s*(?:local)?rule (\w+):\n", block)
        if match:
            fields = {key: re.search(rf"^\s*{key}: (.*)$", block, re.M) for key in ("wildcards", "resources")}
            jobs.append((match.group(1), *(m.group(1) if m else "" for m in fields.values())))
    return jobs


def test_the_readmes_run_selection_command_plans_2_architectures_x_3_seeds():
    """README: `snakemake --profile slurm --config 'run={architectures: [...], seeds: [1, 2, 3]}'` (nested
    --config values reach the workflow as strings; the seeds must still be seeds)."""
    readme = (REPO / "README.md").read_text()
    documented = re.search(r"^snakemake (.*--config 'run=\{architectures: \[.*\], seeds: \[.*\]\}')$", readme, re.M)
    assert documented, "the README's run-selection example is gone"
    result = _plan(*shlex.split(documented.group(1)))
    assert result.returncode == 0, result.stderr[-3000:]
    trained = sorted(wildcards for rule, wildcards, _ in _jobs(result.stdout) if rule == "train")
    assert trained == [f"arch={arch}, block=seeds1_2_3" for arch in ("l4_h8", "l4_h8_wd")]
    published = sorted(wildcards for rule, wildcards, _ in _jobs(result.stdout) if rule == "publish_refit")
    assert published == sorted(f"arch={arch}, seed={seed}" for arch in ("l4_h8", "l4_h8_wd") for seed in (1, 2, 3))


def test_a_results_dir_that_climbs_out_of_the_working_directory_fails_at_parse_time():
    result = _dry_run("--config", "results_dir=../../../../../etc")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    outside = os.path.normpath(REPO / "../../../../../etc")  # /etc from a checkout 5 or fewer levels deep
    assert (
        f"Invalid configuration: config key 'results_dir': '../../../../../etc' resolves to {outside}, outside"
        in output
    )


def test_results_dir_below_a_file_fails_at_parse_time_naming_key_path_and_file():
    result = _dry_run("--config", "results_dir=README.md/out")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert (
        "Invalid configuration: config key 'results_dir': README.md/out is below README.md, which is a file" in output
    )
    assert "NotADirectoryError" not in output and "Traceback" not in output


def test_train_runtime_is_planned_from_the_config_alone(tmp_path):
    """One epoch of C4's expected_tokens per refit, a job's seeds_per_job refits at l2_h8's throughput; a corpus
    meta.json in results_dir is not read."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    results = tmp_path / "results"
    (results / "data/c4_code_2b").mkdir(parents=True)
    (results / "data/c4_code_2b/meta.json").write_text(json.dumps({"n_tokens": 10}))
    result = _plan("--config", f"results_dir={results}", "run={architectures: [l2_h8], seeds: [1, 2]}")
    assert result.returncode == 0, result.stderr[-3000:]
    runtimes = {
        re.search(r"runtime=(\d+)", resources).group(1)
        for rule, _, resources in _jobs(result.stdout)
        if rule == "train"
    }
    compute = config["compute"]
    tokens = config["corpora"]["c4_code_2b"]["expected_tokens"]
    k, rate = config["training"]["seeds_per_job"], compute["train_tokens_per_second"]["l2_h8"]
    assert runtimes == {str(math.ceil(compute["runtime_margin"] * k * tokens / rate / 60) + 10)}


def test_network_inputs_plans_exactly_the_jobs_that_download(paper_plan):
    """README "Offline clusters": `snakemake network_inputs` on the paper builds the hub tokenizers, the hub
    corpora's shards, wikitext-2 and the neuron statistics' C4 validation text, and nothing else; the full plan has
    no other job of those rules."""
    result = _dry_run("--", "network_inputs")
    network = job_counts(result.stdout + result.stderr)
    assert network == {
        "fetch_tokenizer": 2,
        "tokenize_shard": 20,
        "corpus_meta": 2,
        "heldout_wikitext": 2,
        "heldout_neuron_text": 2,  # C4 validation for the neuron statistics, in neox_digits and in gpt2
        "network_inputs": 1,
        "total": 29,
    }
    everything = paper_plan
    assert all(everything[rule] == count for rule, count in network.items() if rule not in ("network_inputs", "total"))
    for doc in ("README.md", "docs/slurm.md"):
        assert "snakemake network_inputs --cores 4" in (REPO / doc).read_text(), doc
        assert "--until corpus_meta" not in (REPO / doc).read_text(), doc


ACTIVATE = "source .venv/bin/activate"


def test_readme_enters_the_environment_before_any_snakemake_or_headstab_command():
    readme = (REPO / "README.md").read_text()
    activation = readme.find(ACTIVATE)
    assert activation >= 0, "the README never says how to enter the environment"
    first_section = readme.index("## The two commands")
    assert first_section < activation < readme.index("## Running the full paper")
    blocks = [(match.start(), match.group(1)) for match in re.finditer(r"```\w*\n(.*?)```", readme, re.S)]
    commands = [(start, block) for start, block in blocks if re.search(r"^(snakemake|python -m headstab)", block, re.M)]
    assert commands
    assert all(start > activation for start, _ in commands), [block for start, block in commands if start < activation]
    full_paper = readme[readme.index("## Running the full paper") :]
    assert full_paper.index(ACTIVATE) < full_paper.index("```bash\nsnakemake")


@pytest.mark.skipif(not (REPO / ".venv/bin/activate").is_file(), reason="no .venv here (make venv creates it)")
def test_the_documented_activation_puts_snakemake_and_headstab_on_the_path():
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    script = f"{ACTIVATE} && snakemake --version && python -m headstab.provenance --help"
    result = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.match(r"\d+\.\d+", result.stdout)


def test_a_second_worktree_plans_in_its_own_directory(tmp_path):
    """docs/operations.md: a second run goes in its own worktree (own .snakemake/, relative paths there)."""
    text = (REPO / "docs/operations.md").read_text()
    assert "git worktree add ../headstab-run2" in text and "may run side by side" not in text
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    worktree = tmp_path / "headstab-run2"
    subprocess.run(["git", "worktree", "add", "--detach", str(worktree)], cwd=REPO, check=True, capture_output=True)
    try:
        # One architecture of the default config/config.yaml: the worktree's own files plan it (the whole paper's
        # plan is test_default_config_is_the_full_paper_and_plans_1210_refits_in_train_jobs_of_5's).
        result = _dry_run("--config", "run={architectures: [l4_h16_wd], seeds: [3, 4, 5]}", cwd=worktree)
        assert result.returncode == 0, result.stderr[-3000:]
        counts = job_counts(result.stdout + result.stderr)
        assert counts.get("train") == 1 and counts.get("publish_refit") == 3, counts
        assert (worktree / ".snakemake").is_dir()
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, capture_output=True)


def test_the_paper_plans_the_neuron_stream_of_gpt2_on_a_gpu_with_its_pass_memory(tmp_path):
    """neurons: 5 refits of gpt2 (10 pairs of 12.7 GB cross-layer accumulators) stream on a GPU; the host holds one
    pair's copy while it is written, so the job's host memory is a few pairs, not ten; the attention-only l2_h8_attn
    gets no neuron job, and head_neuron_layers sets gpt2's layers beside its heads."""
    result = _plan(
        "--config", f"results_dir={tmp_path / 'results'}", "run={architectures: [gpt2, l2_h8_attn], seeds: null}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _jobs(result.stdout)
    stream = [(wildcards, resources) for rule, wildcards, resources in jobs if rule == "neuron_statistics"]
    assert [wildcards for wildcards, _ in stream] == ["arch=gpt2"]
    memory = int(re.search(r"mem_mb=(\d+)", stream[0][1]).group(1))
    assert "gpu=1" in stream[0][1] and 12_700 < memory < 4 * 12_700  # a pair's copy and the null's block, not 10
    assert [rule for rule, _, _ in jobs].count("neuron_universality") == 1
    assert [rule for rule, _, _ in jobs].count("head_neuron_layers") == 1
    # its held-out text: C4 validation's first neurons.tokens tokens in gpt2's tokenizer, from the hub; the
    # attention-only l2_h8_attn (neox_digits) streams none
    text = [wildcards for rule, wildcards, _ in jobs if rule == "heldout_neuron_text"]
    assert text == ["dataset=allenai--c4_en_validation_first10000000, tokenizer=gpt2"]
    shard = f"{tmp_path / 'results'}/data/heldout/allenai--c4_en_validation_first10000000/gpt2.npy"
    reads = re.search(r"rule neuron_statistics:\n\s+input: (.*)$", result.stdout, re.M).group(1).split(", ")
    assert shard in reads and not any("wikitext" in path for path in reads)
