"""The published refits through the workflow: config/published.yaml plans the paper without training, and
every rule that loads a refit or reads its caches runs from a local mirror in the published repository's layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers.neuron_moments import assert_streamed_moments, heldout_windows, load_pair_file, skipped_ids
from helpers.published_refits import numpy_layer0_patterns, numpy_mlp_post, tl2_state_dict, write_mirror
from helpers.workflow_runs import MODEL_ANALYSIS_TABLES, REPO, job_counts, run_snakemake

from headstab.plan.config import architecture_spec, load_yaml
from headstab.plan.spec import ArchitectureSpec

# Two refits give every pair-wise analysis; seed 3 lies outside the tiny default (1-2), so run.seeds must select it.
SEEDS = (2, 3)
MIRROR_TABLES = MODEL_ANALYSIS_TABLES


def test_published_config_plans_the_paper_with_1210_fetch_jobs_and_no_training():
    result = run_snakemake("-n", "--quiet", "rules", "--configfile", "config/published.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts.get("fetch_published") == 24 * 50 + 2 * 5, counts
    assert "train" not in counts and "tokenize_shard" not in counts and "corpus_meta" not in counts, counts
    for rule in ("cache_activations", "pair_similarity", "stability_tables", "residual_cka", "meta_sne"):
        assert counts.get(rule), (rule, counts)


def test_network_inputs_of_the_published_config_are_the_downloads():
    result = run_snakemake("network_inputs", "-n", "--quiet", "rules", "--configfile", "config/published.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts.get("fetch_published") == 1210 and counts.get("fetch_tokenizer") == 2, counts
    assert "cache_activations" not in counts and "tokenize_shard" not in counts, counts


def mirror_config(tmp_path: Path, mirror: Path) -> Path:
    """tests/config/tiny.yaml with one architecture, l2_h4, from the mirror (seeds SEEDS)."""
    config = load_yaml(REPO / "tests/config/tiny.yaml")
    config["results_dir"] = str(tmp_path / "results")
    config["run"] = {"architectures": ["l2_h4"], "seeds": list(SEEDS)}
    config["architectures"] = {"l2_h4": {"n_layers": 2, "n_heads": 4, "source": "published_local", "path": str(mirror)}}
    path = tmp_path / "published_tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.integration
def test_the_model_analyses_run_from_a_local_mirror_of_published_refits(tmp_path):
    """Every rule that runs or reads a published refit, from a local mirror (MIRROR_TABLES); the layer-0 patterns
    and the neurons' streamed moments equal those computed in numpy from the raw tensors."""
    from headstab.activations.reader import open_cache
    from headstab.plan.config import load_config

    (tmp_path / "chkpts").mkdir()
    config_path = mirror_config(tmp_path, tmp_path / "chkpts")
    spec = architecture_spec(load_config(config_path), "l2_h4")
    write_mirror(tmp_path / "chkpts", spec, SEEDS)
    results = tmp_path / "results/l2_h4"
    targets = [str(results / f"tables/{name}.csv") for name in MIRROR_TABLES]
    result = run_snakemake(*targets, "--cores", "2", "--configfile", str(config_path), timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts.get("fetch_published") == len(SEEDS) and "train" not in counts, counts
    meta = json.loads((results / "checkpoints/seed2/meta.json").read_text())
    original = tmp_path / "chkpts/l2_h4/causal_attn_l2_h4_seed2_epoch1_c4_gelu/final.pt"
    assert meta["source"]["kind"] == "published_local" and meta["conversion"].startswith("transformer_lens2")
    assert meta["original_sha256"] == __import__("hashlib").sha256(original.read_bytes()).hexdigest()
    assert not (results / "checkpoints/seed2/train_log.csv").exists()
    for name in MIRROR_TABLES:
        assert (results / f"tables/{name}.csv").stat().st_size > 0, name
    # The cache writer's layer-0 patterns equal those computed in numpy from the raw TL2 tensors.
    raw = tl2_state_dict(spec, seed=2)
    with open_cache(results / "caches/seed2.h5") as cache:
        tokens, lengths = cache.tokens("primary"), cache.lengths("primary")
        patterns = cache.hook_pattern("primary", layer=0)  # [prompt, head, query, key]
    for prompt, length in enumerate(lengths[:4]):
        expected = numpy_layer0_patterns(raw, tokens[prompt : prompt + 1, :length])[0]
        np.testing.assert_allclose(patterns[prompt, :, :length, :length], expected, atol=1e-5)
    assert torch.load(results / "checkpoints/seed2/final.pt", weights_only=True)["embed.weight"].dtype == torch.float32
    assert (results / "figures/neuron_universality.png").stat().st_size > 0
    assert_neuron_moments_match_numpy(tmp_path, config_path, spec)


def assert_neuron_moments_match_numpy(tmp_path: Path, config_path: Path, spec: ArchitectureSpec) -> None:
    """Both refits of the pair file stream the MLP activations computed in numpy from the raw TL2 tensors, over the
    same held-out windows less the newline and BOS/EOS/padding positions (helpers.neuron_moments)."""
    windows = heldout_windows(
        tmp_path / "results/data/tiny_heldout", load_yaml(config_path)["neurons"]["tokens"], spec.seq_len
    )
    assert spec.act_fn == "gelu", spec.act_fn  # numpy_mlp_post's exact GELU
    newline, special = skipped_ids(tmp_path / "results/tokenizers/tiny_bpe")
    assert len(newline) == 1 and special == [0], (newline, special)  # <|endoftext|> is BOS, EOS and padding
    keep = ~np.isin(windows, newline + special)
    assert np.isin(windows, special).any()  # the held-out corpus's document separators
    statistics = load_pair_file(tmp_path / f"results/l2_h4/neurons/pairs/seed{SEEDS[0]}_seed{SEEDS[1]}.npz")
    assert int(statistics["n_tokens"]) == keep.sum() < windows.size, windows.shape
    for side, seed in zip("ab", SEEDS, strict=True):
        assert_streamed_moments(statistics, side, numpy_mlp_post(tl2_state_dict(spec, seed), windows)[:, keep])
