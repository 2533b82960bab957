"""Seeded families from the hub through the workflow: config/hub_families.yaml validates and plans, and every
rule that loads a model or reads its caches runs on tiny random GPT-2 and GPT-NeoX families (save_pretrained)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.hub_family_models import (
    N_CTX,
    audit_config,
    build_tokenizer,
    hf_layer0_patterns,
    hf_mlp_post,
    train_run,
    write_family,
    write_revisions,
)
from helpers.neuron_moments import assert_streamed_moments, heldout_windows, load_pair_file, skipped_ids
from helpers.workflow_runs import MODEL_ANALYSIS_TABLES, REPO, job_counts, run_snakemake

from headstab.plan.config import load_yaml, validate_config

FAMILIES = {"gpt2_fam": "gpt2", "neox_fam": "neox"}
SEEDS = (1, 2)  # two refits per family give every pair-wise analysis of the DAG
FAMILY_TABLES = (*MODEL_ANALYSIS_TABLES, "layer_stability")


def test_hub_families_config_validates_and_plans_fetches_without_training():
    config = validate_config(load_yaml(REPO / "config/hub_families.yaml"))
    assert config["architecture_defaults"]["source"] == "hub_family"
    result = run_snakemake("-n", "--quiet", "rules", "--configfile", "config/hub_families.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts.get("fetch_family") == 5 * 9 + 2 * 3 + 5, counts  # PolyPythias, the decoupled 160M runs, CRFM
    assert "train" not in counts and "init_weights" not in counts and "tokenize_shard" not in counts, counts
    # the provenance audit: step0 and step1 of every Pythia seed, the analysed weights of every seed, one per family
    assert (counts.get("digest_revision"), counts.get("digest_refit"), counts.get("audit_family")) == (102, 56, 8)
    for rule in ("cache_activations", "pair_similarity", "stability_tables", "weight_norms", "meta_sne"):
        assert counts.get(rule), (rule, counts)
    assert counts.get("optimizer_comparison") == 1, counts  # analysis.optimizer_pairs


def test_network_inputs_of_the_hub_families_are_the_model_downloads():
    result = run_snakemake("network_inputs", "-n", "--quiet", "rules", "--configfile", "config/hub_families.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts.get("fetch_family") == 56 and counts.get("digest_revision") == 102, counts
    assert "cache_activations" not in counts and "audit_family" not in counts, counts


def family_config(tmp_path: Path) -> Path:
    """tests/config/tiny.yaml with two families, GPT-2 and GPT-NeoX, from local save_pretrained directories."""
    for kind in FAMILIES.values():
        write_family(tmp_path / "models", kind, SEEDS)
    config = load_yaml(REPO / "tests/config/tiny.yaml")
    config["results_dir"] = str(tmp_path / "results")
    config["run"] = {"architectures": list(FAMILIES), "seeds": None}
    config["tokenizers"] = {"family_bpe": {"source": "local", "path": str(tmp_path / "models/tokenizer")}}
    heldout = {**config["corpora"]["tiny_heldout"], "tokenizer": "family_bpe"}
    config["corpora"] = {"family_heldout": heldout}
    config["architecture_defaults"].update(tokenizer="family_bpe", corpus="family_heldout", seeds=list(SEEDS))
    config["architectures"] = {
        name: {"source": "hub_family", "models": {"path": str(tmp_path / f"models/{kind}/seed{{seed}}")}}
        for name, kind in FAMILIES.items()
    }
    config["analysis"].update(heldout_corpus="family_heldout", optimizer_pairs={"gpt2_fam": "neox_fam"})
    path = tmp_path / "families.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.integration
def test_the_model_analyses_run_on_tiny_gpt2_and_gpt_neox_families(tmp_path):
    """Every rule that runs or reads a family's model, from local save_pretrained directories (FAMILY_TABLES); the
    layer-0 patterns and the neurons' streamed moments equal those of the models run directly with transformers."""
    from headstab.activations.reader import open_cache
    from headstab.plan.config import architecture_spec

    config_path = family_config(tmp_path)
    spec = architecture_spec(validate_config(load_yaml(config_path)), "neox_fam")
    assert (spec.n_layers, spec.n_heads, spec.d_head, spec.n_ctx, spec.positional_embedding_type) == (
        2,
        2,
        8,
        N_CTX,
        "rotary",
    )
    compare = tmp_path / "results/compare/gpt2_fam"  # analysis.optimizer_pairs: GPT-2 family vs NeoX family
    targets = [str(tmp_path / f"results/{name}/tables/{table}.csv") for name in FAMILIES for table in FAMILY_TABLES]
    targets.append(str(compare / "tables/perplexity.csv"))
    result = run_snakemake(*targets, "--cores", "2", "--configfile", str(config_path), timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert (
        counts.get("fetch_family") == len(FAMILIES) * len(SEEDS)
        and "train" not in counts
        and "init_weights" not in counts
    ), counts
    for name, kind in FAMILIES.items():
        results = tmp_path / "results" / name
        meta = json.loads((results / "checkpoints/seed2/meta.json").read_text())
        assert meta["loader"] == "transformers" and meta["source"]["kind"] == "hub_family", meta
        for table in FAMILY_TABLES:
            assert (results / f"tables/{table}.csv").stat().st_size > 0, (name, table)
        # The cache's layer-0 patterns equal those of the Hugging Face model run directly.
        with open_cache(results / "caches/seed2.h5") as cache:
            tokens, lengths = cache.tokens("primary"), cache.lengths("primary")
            patterns = cache.hook_pattern("primary", layer=0)  # [prompt, head, query, key]
        for prompt, length in enumerate(lengths[:4]):
            expected = hf_layer0_patterns(tmp_path / f"models/{kind}/seed2", tokens[prompt : prompt + 1, :length])[0]
            np.testing.assert_allclose(patterns[prompt, :, :length, :length], expected, atol=1e-6)
        assert (results / "figures/neuron_universality.png").stat().st_size > 0
        assert_neuron_moments_match_transformers(tmp_path, results, kind, spec.seq_len)
    assert (compare / "tables/perplexity.csv").stat().st_size > 0


def assert_neuron_moments_match_transformers(tmp_path: Path, results: Path, kind: str, seq_len: int) -> None:
    """Both refits of the pair file stream the neurons of the saved models run directly with transformers (`act` in
    every MLP), over the same held-out windows less the newline and BOS/EOS/padding positions (helpers.neuron_moments)."""
    neurons = load_yaml(tmp_path / "families.yaml")["neurons"]
    windows = heldout_windows(tmp_path / "results/data/family_heldout", neurons["tokens"], seq_len)
    newline, special = skipped_ids(tmp_path / "models/tokenizer")
    keep = ~np.isin(windows, newline + special)
    statistics = load_pair_file(results / "neurons/pairs/seed1_seed2.npz")
    assert len(newline) == 1 and special == [0], (newline, special)  # <|endoftext|> is BOS, EOS and padding
    assert int(statistics["n_tokens"]) == keep.sum() < windows.size, windows.shape
    assert (str(statistics["anchor"]), str(statistics["other"])) == ("1", "2")
    for side, seed in (("a", 1), ("b", 2)):
        activations = hf_mlp_post(tmp_path / f"models/{kind}/seed{seed}", windows)[:, keep]
        assert_streamed_moments(statistics, side, activations.astype(np.float64))


@pytest.mark.integration
def test_no_analysis_of_a_family_runs_before_its_provenance_audit_passes(tmp_path):
    """A local GPT-NeoX family that serves its step0 as step1 (EleutherAI/pythia issue 83) fails its audit naming
    the revisions, and its caches and neuron statistics wait for that audit (test_the_model_analyses_run_... runs
    families that pass)."""
    tokenizer = build_tokenizer(tmp_path / "models/tokenizer")
    runs = {seed: train_run("neox", seed, seed, len(tokenizer)) for seed in SEEDS}
    copied = {seed: {**run, "step1": run["step0"]} for seed, run in runs.items()}
    entry = {
        "models": {"path": write_revisions(tmp_path / "models/copied", "neox", copied, tokenizer), "revision": "final"},
        "audit": {"revisions": ["step0", "step1"]},
    }
    config = audit_config(tmp_path, {"copied": entry}, seeds=SEEDS)
    cache = str(tmp_path / "results/copied/caches/seed1.h5")
    neurons = str(tmp_path / "results/copied/neurons/maxima.npz")
    plan = run_snakemake(cache, neurons, "-n", "--quiet", "rules", "--configfile", str(config))
    counts = job_counts(plan.stdout + plan.stderr)
    assert (counts.get("digest_revision"), counts.get("audit_family"), counts.get("cache_activations")) == (4, 1, 1)
    assert counts.get("neuron_statistics") == 1, counts
    # --keep-going: every job that does not wait for the audit runs, so only the audit input holds these back
    result = run_snakemake(cache, neurons, "--cores", "2", "--keep-going", "--configfile", str(config), timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "Error in rule audit_family (copied): hub family 'copied' is refused by its provenance audit" in output
    for seed in SEEDS:
        assert f"[duplicate:seed{seed}@step0=seed{seed}@step1] seed{seed}@step0 (" in output, output[-3000:]
    assert (
        "descent seed1 step0 -> step1: relative L2 0, ratio 0"
        in (tmp_path / "results/logs/audit_family/copied.log").read_text()
    )
    assert not (tmp_path / "results/copied/audit/audit.json").exists()
    assert not (tmp_path / "results/copied/caches").exists()  # its cache job never started
    assert not (tmp_path / "results/copied/neurons").exists()  # nor its neuron statistics
