"""Plans of the §4.4-4.9 rules (workflow/rules/paper_analyses.smk): which jobs a configuration gets,
that bad settings fail in the first seconds, and that every report caption exists and parses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "workflow/rules/paper_analyses.smk"


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
        [sys.executable, "-m", "snakemake", "-n", "--nolock", "--configfile", str(path), "--quiet", "rules", "--", *targets],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300,
    )


def _job_counts(result: subprocess.CompletedProcess) -> dict[str, int]:
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    counts = {}
    for line in (result.stdout + result.stderr).splitlines():
        match = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+(\d+)\s*$", line)
        if match:
            counts[match.group(1)] = int(match.group(2))
    return counts


def test_demo_plans_one_model_job_per_architecture_and_one_comparison_per_adam_adamw_pair(tmp_path):
    counts = _job_counts(_dry_run(tmp_path))
    per_architecture = ("refit_measurements", "qnorm_correlation", "prompt_length", "residual_cka", "ablation")
    assert {rule: counts.get(rule) for rule in per_architecture} == dict.fromkeys(per_architecture, 8)
    # l2_h8, l2_h8_attn, l4_h8, l4_h8_attn each have a _wd twin in the demo
    assert counts.get("optimizer_comparison") == 4
    assert [counts.get(rule) for rule in ("stability_gap", "qnorm_summary", "meta_sne", "report_configuration")] == [1] * 4
    # the demo's held-out text is its synthetic_heldout corpus, not wikitext
    assert "heldout_wikitext" not in counts


def test_null_heldout_corpus_fetches_wikitext_once_per_tokenizer(tmp_path):
    counts = _job_counts(_dry_run(tmp_path, lambda c: c["analysis"].update(heldout_corpus=None)))
    assert counts.get("heldout_wikitext") == 1  # every demo architecture uses demo_bpe


def test_without_length_sweep_or_adamw_twins_those_analyses_are_left_out(tmp_path):
    def mutate(config):
        config["run"]["architectures"] = ["l2_h8", "l4_h8_attn"]
        config["prompt_sets"] = {"primary": "resources/prompts/primary.json"}

    counts = _job_counts(_dry_run(tmp_path, mutate))
    assert counts.get("refit_measurements") == 2
    assert "prompt_length" not in counts and "optimizer_comparison" not in counts


def test_comparison_of_an_adamw_member_is_refused_with_the_missing_twin(tmp_path):
    result = _dry_run(tmp_path, None, str(tmp_path / "results/compare/l4_h8_wd/tables/perplexity.csv"))
    assert result.returncode != 0
    assert "l4_h8_wd_wd" in result.stdout + result.stderr


def test_every_cka_hook_plans_the_caches_and_residual_cka(tmp_path):
    """hook_resid_pre / hook_resid_post are added to the caches (cache_options), so the plan no longer fails."""
    for hook in ("hook_resid_pre", "hook_resid_post"):
        (tmp_path / hook).mkdir()
        counts = _job_counts(_dry_run(tmp_path / hook, lambda c: c["analysis"].update(cka_hook=hook)))
        assert counts.get("cache_activations") == 32 and counts.get("residual_cka") == 8  # 8 archs x 4 seeds


def test_every_report_caption_exists_and_is_valid_jinja():
    text = RULES.read_text() + (REPO / "workflow/rules/report.smk").read_text()
    captions = sorted(set(re.findall(r'caption="\.\./report/([\w.]+)"', text)))
    assert len(captions) >= 11
    environment = jinja2.Environment()
    for name in captions + ["workflow.rst"]:
        path = REPO / "workflow/report" / name
        assert path.is_file(), f"caption {path} is missing"
        environment.parse(path.read_text())  # raises TemplateSyntaxError on a broken caption
        if name != "configuration.rst":
            assert "§" in path.read_text(), f"caption {name} does not name the paper section"


def test_captions_only_use_params_their_rules_define():
    """A caption naming snakemake.params.X renders only if its rule has params X (else the report fails)."""
    text = RULES.read_text()
    for block in re.split(r"\n(?=rule )", text)[1:]:
        for caption in re.findall(r'caption="\.\./report/([\w.]+)"', block):
            used = set(re.findall(r"snakemake\.params\.(\w+)", (REPO / "workflow/report" / caption).read_text()))
            declared = set(re.findall(r"^        (\w+)=", block.split("    params:\n", 1)[-1].split("\n    threads")[0], re.M))
            assert used <= declared, f"{caption} uses params {sorted(used - declared)} that its rule lacks"
