"""The planted positive control: refits whose previous-token, BOS and induction heads are written by hand
(tests/helpers/planted_circuits.py), loaded as published refits and run through the per-architecture DAG.
The metric and the head types must find what was planted: every planted head typed, matched to its twin by
best match and one-to-one, stable, and above the prompt-permutation null exactly when it reads content."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.planted_circuits import ROLES, planted_roles, planted_state_dict, write_planted_mirror
from helpers.workflow_runs import REPO, job_counts, run_snakemake

from headstab.head_type_thresholds import fixed_thresholds, type_heads
from headstab.head_types import has_type, probe_scores, probe_set, score_table
from headstab.plan.config import architecture_spec, load_config, load_yaml

SEEDS = (1, 2, 3)
ARCH = {"n_layers": 2, "n_heads": 4, "d_model": 256, "d_head": 64, "n_ctx": 128, "attn_only": True}
FIXED = {"previous_token": 0.4, "duplicate_token": 0.4, "induction": 0.4, "bos": 0.5, "copying": 0.5}  # the schema's
# The type each planted role must get: the induction head falls back to BOS when no earlier copy exists.
EXPECTED_TYPE = {"previous_token": "previous_token", "bos": "bos", "induction": "induction+bos", "random": "none"}
WORDS = (
    "apple river garden window letter bridge market forest engine lantern mirror basket island castle ladder "
    "signal harbor meadow tower candle wagon valley bottle compass hammer pocket school kitchen village"
).split()


def repeat_prompts(n: int = 24, seed: int = 0) -> list[str]:
    """Prompts of random words, each with a span of 3-5 words repeated after a gap, at varying offsets."""
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(n):
        words = list(rng.choice(WORDS, size=14))
        span = int(rng.integers(3, 6))
        start, gap = int(rng.integers(0, 5)), int(rng.integers(0, 6))
        repeated = words[start : start + span]
        prompts.append(" ".join(words[: start + span + gap] + repeated + words[start + span + gap :]))
    return prompts


def planted_config(tmp_path: Path) -> Path:
    config = load_yaml(REPO / "tests/config/tiny.yaml")
    prompts = tmp_path / "repeats.json"
    prompts.write_text(json.dumps(repeat_prompts()))
    config.update(
        results_dir=str(tmp_path / "results"),
        run={"architectures": ["planted"], "seeds": list(SEEDS)},
        architectures={"planted": {**ARCH, "source": "published_local", "path": str(tmp_path / "mirror")}},
        prompt_sets={"primary": str(prompts)},
        statistics={"n_boot": 200, "prompt_groups": 8},
        head_types={"n_sequences": 16},
    )
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def role_index(roles: dict[tuple[int, int], str]) -> dict[str, tuple[int, int]]:
    return {role: key for key, role in roles.items() if role != "random"}


def test_planted_heads_are_typed_by_their_scores_in_every_refit(tmp_path):
    """The library alone (no workflow): the planted bridges' probe scores give every planted head its type."""
    from headstab.refits.models import build_model
    from headstab.refits.published import convert_tl2_state_dict

    config = load_config(planted_config(tmp_path))
    spec = architecture_spec(config, "planted")
    probe = probe_set(spec.d_vocab, 0, 8, 100, bos_token=0, exclude=[0])
    for seed in SEEDS[:2]:
        model = build_model(spec, seed=0, legacy_gpt2_init=False)
        model.load_state_dict(convert_tl2_state_dict(planted_state_dict(spec, seed), spec))
        scores = score_table(probe_scores(model.eval(), probe), seed)
        types = type_heads(scores, fixed_thresholds(FIXED, spec.n_layers, {}))
        labels = types.set_index(["layer", "head"])["type"]
        for key, role in planted_roles(spec, seed).items():
            assert labels[key] == EXPECTED_TYPE[role], (seed, key, role, types.to_string())
        # the induction head copies (Olsson et al.'s second criterion): its OV circuit's eigenvalues are positive
        copying = scores.set_index(["layer", "head"])["copying"]
        induction = next(key for key, role in planted_roles(spec, seed).items() if role == "induction")
        assert copying[induction] > 0.99, copying.to_string()


@pytest.mark.integration
def test_the_workflow_finds_the_planted_circuit(tmp_path):
    config_path = planted_config(tmp_path)
    spec = architecture_spec(load_config(config_path), "planted")
    write_planted_mirror(tmp_path / "mirror", spec, SEEDS)
    tables = tmp_path / "results/planted/tables"
    names = ("head_types", "head_type_universality", "head_stability", "pair_stability")
    targets = [str(tables / f"{name}.csv") for name in names]
    result = run_snakemake(*targets, "--cores", "2", "--configfile", str(config_path), timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "head_type_scores_step0" not in job_counts(result.stdout + result.stderr)  # published: fixed thresholds
    roles = {seed: planted_roles(spec, seed) for seed in SEEDS}
    where = {seed: role_index(roles[seed]) for seed in SEEDS}

    types = pd.read_csv(tables / "head_types.csv").set_index(["refit", "layer", "head"])
    assert (types["threshold_rule"] == "fixed").all()
    for seed in SEEDS:
        for key, role in roles[seed].items():
            assert types.loc[(seed, *key), "type"] == EXPECTED_TYPE[role], (seed, key, role)

    pairs = pd.read_csv(tables / "pair_stability.csv")
    pairs = pairs[(pairs["scope"] == "same_layer") & (pairs["promptset"] == "primary")]
    pairs = pairs.set_index(["anchor_seed", "pair_seed", "layer", "head"])
    for anchor in SEEDS:
        for other in set(SEEDS) - {anchor}:
            for role in ROLES:
                layer, head = where[anchor][role]
                twin = where[other][role][1]
                row = pairs.loc[(anchor, other, layer, head)]
                assert row["best_head"] == twin and row["assigned_head"] == twin, (anchor, other, role)

    heads = pd.read_csv(tables / "head_stability.csv")
    heads = heads[(heads["scope"] == "same_layer") & (heads["promptset"] == "primary")]
    heads["role"] = [roles[s][(layer, h)] for s, layer, h in zip(heads["anchor_seed"], heads["layer"], heads["head"])]
    planted, random = heads[heads["role"] != "random"], heads[heads["role"] == "random"]
    assert planted["stability"].min() >= 0.95 and planted["stability_one_to_one"].min() >= 0.95
    assert random["stability"].max() < planted["stability"].min()
    # Content-specific agreement: the induction head reads which tokens repeat, the positional heads do not.
    induction = heads[heads["role"] == "induction"]
    assert (induction["above_null_ci_low"] > 0.05).all(), induction[["above_null", "above_null_ci_low"]]
    positional = heads[heads["role"].isin(["previous_token", "bos"])]
    assert positional["above_null"].abs().max() < 1e-3, positional[["role", "above_null"]]

    universality = pd.read_csv(tables / "head_type_universality.csv").set_index(["type", "layer", "statistic"])
    for role, layer in (("previous_token", 0), ("bos", 0), ("induction", 1)):
        for statistic in ("weak_universality", "strong_universality_best_match", "strong_universality_one_to_one"):
            assert universality.loc[(role, layer, statistic), "estimate"] == 1.0, (role, statistic)
        # one head of the type among a layer's 4: a random partner agrees 1/4 of the time, the matched one always
        assert universality.loc[(role, layer, "strong_universality_chance"), "estimate"] == pytest.approx(0.25)
        for kind in ("best_match", "one_to_one"):
            assert universality.loc[(role, layer, f"strong_universality_{kind}_corrected"), "estimate"] == 1.0
        weak = universality.loc[(role, layer, "weak_universality")]
        assert weak["ci_low"] == pytest.approx(0.025 ** (1 / 3)) and weak["ci_high"] == 1.0  # exact, 3 of 3
    assert has_type(types["type"], "induction").sum() == len(SEEDS)
