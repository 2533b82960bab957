"""Plans of the paper-section rule files (workflow/rules/stability.smk and one file per §4.4-4.9): which
jobs a configuration gets, that bad settings fail in the first seconds, that every report caption exists
and parses, and that the rules stay declarative."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jinja2
import yaml
from helpers.workflow_runs import job_counts

REPO = Path(__file__).resolve().parents[2]
SECTIONS = (
    "stability",
    "weight_norms",
    "prompt_length",
    "optimizers",
    "stability_gap",
    "residual_cka",
    "ablation",
    "meta_sne",
    "statistics",
    "training_dynamics",
    "training_curves",
    "effective_rank",
    "layer_robustness",
    "seed_grid",
    "head_types",
    "noise_ceiling",
    "neurons",
)
RULE_FILES = [REPO / f"workflow/rules/{section}.smk" for section in SECTIONS] + [REPO / "workflow/rules/report.smk"]


def _dry_run(tmp_path: Path, mutate=None, *targets: str) -> subprocess.CompletedProcess:
    """`snakemake -n` of the demo config (mutated) with a fresh results_dir, so every job is planned."""
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["results_dir"] = str(tmp_path / "results")
    if mutate is not None:
        mutate(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--nolock",
            "--configfile",
            str(path),
            "--quiet",
            "rules",
            "--",
            *targets,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _job_counts(result: subprocess.CompletedProcess) -> dict[str, int]:
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return job_counts(result.stdout + result.stderr)


def test_demo_plans_one_job_per_section_rule_and_architecture_and_one_comparison_per_adam_adamw_pair(tmp_path):
    counts = _job_counts(_dry_run(tmp_path))
    per_architecture = (
        "stability_tables",
        "stability_figures",
        "weight_norms",
        "weight_norm_correlation",
        "prompt_length",
        "validation_perplexity",
        "activation_norms",
        "residual_cka",
        "ablation_perplexity",
        "ablation",
        "effective_rank",
        "layer_drop_swap",
        "layer_robustness",
        "layer_pseudo_values",
        "noise_ceiling_scores",
        "noise_ceiling_tables",
    )
    assert {rule: counts.get(rule) for rule in per_architecture} == dict.fromkeys(per_architecture, 4)
    # l2_h8_attn is the demo's one architecture with a _wd twin
    assert counts.get("optimizer_comparison") == counts.get("optimizer_training_curves") == 1
    assert counts.get("training_curves") == 4
    assert [
        counts.get(rule)
        for rule in (
            "stability_gap",
            "weight_norm_summary",
            "meta_sne",
            "report_configuration",
            "effective_rank_summary",
            "layer_robustness_summary",
        )
    ] == [1] * 6
    # the 3 x 3 seed grid of l2_h8: its diagonal copied from l2_h8, six refits and the diagonal's three one-ulp
    # twins trained in blocks of training.seeds_per_job = 5 (two train jobs), one decomposition
    assert counts.get("reuse_paper_refit") == 3 and counts.get("train_seed_grid") == 2
    assert counts.get("publish_refit") == 16 + 6 + 3
    assert counts.get("seed_grid") == 1
    # the demo's held-out text is its synthetic_heldout corpus, not wikitext, for the neurons too (offline)
    assert "heldout_wikitext" not in counts and "heldout_neuron_text" not in counts
    # MLP neurons: l2_h8 is the demo's one architecture with MLPs; the attention-only ones get no neuron job
    assert [counts.get(rule) for rule in ("neuron_statistics", "neuron_universality", "head_neuron_layers")] == [1] * 3


def test_null_heldout_corpus_fetches_wikitext_once_per_tokenizer(tmp_path):
    counts = _job_counts(_dry_run(tmp_path, lambda c: c["analysis"].update(heldout_corpus=None)))
    assert counts.get("heldout_wikitext") == 1  # every demo architecture uses demo_bpe


def test_without_length_sweep_or_adamw_twins_those_analyses_are_left_out(tmp_path):
    def mutate(config):
        config["run"]["architectures"] = ["l2_h8", "l4_h8_attn"]
        config["prompt_sets"] = {"primary": "resources/prompts/primary.json"}

    counts = _job_counts(_dry_run(tmp_path, mutate))
    assert counts.get("validation_perplexity") == counts.get("ablation_perplexity") == 2
    assert "prompt_length" not in counts and "optimizer_comparison" not in counts


def test_comparison_of_an_adamw_member_is_refused_with_the_missing_twin(tmp_path):
    result = _dry_run(tmp_path, None, str(tmp_path / "results/compare/l2_h8_attn_wd/tables/perplexity.csv"))
    assert result.returncode != 0
    assert "l2_h8_attn_wd_wd" in result.stdout + result.stderr


def test_every_cka_hook_plans_the_caches_and_residual_cka(tmp_path):
    """hook_resid_pre / hook_resid_post are added to the caches (cache_options), so the plan no longer fails."""
    for hook in ("hook_resid_pre", "hook_resid_post"):
        (tmp_path / hook).mkdir()
        counts = _job_counts(_dry_run(tmp_path / hook, lambda c: c["analysis"].update(cka_hook=hook)))
        # one cache job per 6 refits (compute.cache_refits_per_job): 4 archs x 4 seeds, the 3x3 grid and 3 twins
        assert counts.get("cache_activations") == 4 + 2 and counts.get("publish_cache") == 16 + 9 + 3
        assert counts.get("residual_cka") == 4


def test_every_report_caption_exists_and_is_valid_jinja():
    text = "".join(path.read_text() for path in RULE_FILES)
    captions = sorted(set(re.findall(r'caption="\.\./report/([\w.]+)"', text)))
    assert len(captions) >= 17
    environment = jinja2.Environment()
    for name in captions + ["workflow.rst"]:
        path = REPO / "workflow/report" / name
        assert path.is_file(), f"caption {path} is missing"
        environment.parse(path.read_text())  # raises TemplateSyntaxError on a broken caption
        if name != "configuration.rst":
            assert "§" in path.read_text(), f"caption {name} does not name the paper section"


def test_every_caption_and_rule_docstring_is_valid_restructuredtext():
    """Snakemake renders each caption, and each rule's docstring, as reStructuredText in the report (captions
    after Jinja): a bare |x| there is a substitution reference, which docutils reports as an error."""
    import io

    import docutils.core

    texts = {
        path.name: re.sub(r"{%.*?%}", "", re.sub(r"{{.*?}}", "0", path.read_text(), flags=re.S), flags=re.S)
        for path in sorted((REPO / "workflow/report").glob("*.rst"))
    }
    for path in sorted((REPO / "workflow/rules").glob("*.smk")):
        for rule, docstring in re.findall(r'^rule (\w+)[^\n]*:\n    """(.*?)"""', path.read_text(), re.M | re.S):
            texts[f"{path.name}: rule {rule}"] = textwrap.dedent("    " + docstring)
    assert len(texts) > 60
    for name, text in texts.items():
        stream = io.StringIO()
        docutils.core.publish_doctree(text, settings_overrides={"report_level": 3, "warning_stream": stream})
        assert not stream.getvalue(), f"{name}: {stream.getvalue()}"


def test_captions_only_use_params_their_rules_define():
    """A caption naming snakemake.params.X renders only if its rule has params X (else the report fails)."""
    text = "".join(path.read_text() for path in RULE_FILES)
    for block in re.split(r"\n(?=rule )", text)[1:]:
        for caption in re.findall(r'caption="\.\./report/([\w.]+)"', block):
            used = set(re.findall(r"snakemake\.params\.(\w+)", (REPO / "workflow/report" / caption).read_text()))
            declared = set(
                re.findall(r"^        (\w+)=", block.split("    params:\n", 1)[-1].split("\n    threads")[0], re.M)
            )
            assert used <= declared, f"{caption} uses params {sorted(used - declared)} that its rule lacks"


def test_every_figure_has_its_own_caption_named_after_it():
    """One caption per figure: workflow/report/<figure>.rst, used by exactly one output."""
    text = "".join(path.read_text() for path in RULE_FILES)
    used = re.findall(r'caption="\.\./report/(\w+)\.rst"', text)
    assert len(used) == len(set(used)), sorted(name for name in used if used.count(name) > 1)
    for figure, caption in re.findall(r'_path\((?:"[^"]*", )?"(\w+)"\),\s*caption="\.\./report/(\w+)\.rst"', text):
        assert caption == figure, f"figure {figure}.png has caption {caption}.rst"
    assert sorted(path.stem for path in (REPO / "workflow/report").glob("*.rst")) == sorted(used + ["workflow"])


def test_rules_are_declarative_and_each_section_has_its_script():
    """No lambda in any rule file and a short common.smk; every section rule runs workflow/scripts/<rule>.py;
    the Snakefile includes every rule file."""
    snakefile = (REPO / "Snakefile").read_text()
    for path in sorted((REPO / "workflow/rules").glob("*.smk")):
        assert f'include: "workflow/rules/{path.name}"' in snakefile, path.name
        assert "lambda" not in path.read_text(), path.name
    assert len((REPO / "workflow/rules/common.smk").read_text().splitlines()) <= 200
    for path in RULE_FILES:
        text = path.read_text()
        assert "lambda" not in text, path.name
        assert "include:" not in text, f"{path.name} includes a rule file; the Snakefile includes them all"
        for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, re.M | re.S):
            assert f'"../scripts/{rule}.py"' in body, f"rule {rule} does not run its own script"
            assert (REPO / "workflow/scripts" / f"{rule}.py").is_file(), rule
    assert '"primary"' not in "".join(path.read_text() for path in RULE_FILES)


def test_held_out_corpus_in_another_tokenizer_fails_the_plan_naming_the_key(tmp_path):
    def mutate(config):
        config["tokenizers"]["other_bpe"] = {**config["tokenizers"]["demo_bpe"]}
        config["corpora"]["other_heldout"] = {**config["corpora"]["synthetic_heldout"], "tokenizer": "other_bpe"}
        config["analysis"]["heldout_corpus"] = "other_heldout"

    result = _dry_run(tmp_path, mutate)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "config key 'analysis.heldout_corpus': corpus 'other_heldout' is tokenized with 'other_bpe'" in output
    assert "pick a held-out corpus with the same tokenizer, or null for wikitext-2" in output


def test_head_type_draws_that_reuse_a_refit_seed_or_a_missing_quantile_fail_the_plan(tmp_path):
    """The held-out initialisations calibrate the thresholds a refit's step 0 is compared with: one of them with a
    refit's seed would be that step 0 itself. The sensitivity table compares against the configured quantile."""
    result = _dry_run(tmp_path, lambda config: config.setdefault("head_types", {}).update(held_out_first_seed=3))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "config key 'head_types.held_out_first_seed'" in output
    assert "(seeds 3-22) would reuse the seeds of refits" in output and "set it above 4" in output
    result = _dry_run(tmp_path, lambda config: config.setdefault("head_types", {}).update(sensitivity_quantiles=[0.95]))
    output = result.stdout + result.stderr
    assert (
        result.returncode != 0
        and "'head_types.sensitivity_quantiles' [0.95] must include head_types.quantile (0.99)" in output
    )


def test_a_probe_set_too_small_to_split_fails_the_plan_naming_the_key(tmp_path):
    """The noise ceiling types every refit on two disjoint halves of the probe set: one sequence has no halves."""
    result = _dry_run(tmp_path, lambda config: config.setdefault("head_types", {}).update(n_sequences=1))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "config key 'head_types.n_sequences' is 1" in output
    assert "set noise_ceiling.n_sequences to at least 2" in output
    result = _dry_run(tmp_path, lambda config: config.update(noise_ceiling={"n_sequences": 1}))
    assert result.returncode != 0 and "noise_ceiling" in result.stdout + result.stderr


def test_the_stability_rule_declares_every_table_the_library_writes():
    """stability.smk lists the tables without importing the library at parse time; they must agree."""
    from headstab.stability import TABLE_NAMES
    from headstab.statistics.interval_tables import TABLE_NAMES as INTERVAL_TABLE_NAMES

    declared = re.search(
        r"^STABILITY_TABLES = \((.*?)\)$", (REPO / "workflow/rules/stability.smk").read_text(), re.M | re.S
    )
    assert declared and tuple(re.findall(r'"(\w+)"', declared.group(1))) == TABLE_NAMES + INTERVAL_TABLE_NAMES
