"""The tiny configuration (tests/config/tiny.yaml) through the whole DAG, then its outputs inspected."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import tiny_snakemake
from helpers.tolerances import reduction_atol

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURES = ("l2_h4", "l2_h4_wd")
SEEDS = (1, 2)
PROMPT_SETS = ("primary", "len5", "len10")

pytestmark = pytest.mark.integration


def test_every_refit_has_weights_log_and_meta_and_loss_goes_down(tiny_run):
    for arch in ARCHITECTURES:
        for seed in SEEDS:
            checkpoint = tiny_run / arch / "checkpoints" / f"seed{seed}"
            assert (checkpoint / "final.pt").stat().st_size > 0
            log = pd.read_csv(checkpoint / "train_log.csv")
            assert list(log.columns[:5]) == ["step", "tokens", "loss", "lr", "seconds"]
            assert log["loss"].iloc[-1] < log["loss"].iloc[0], f"{arch} seed {seed}: loss did not go down"
            meta = json.loads((checkpoint / "meta.json").read_text())
            assert meta["seed"] == seed


def test_different_seeds_give_different_weights(tiny_run):
    import torch

    first = torch.load(tiny_run / "l2_h4/checkpoints/seed1/final.pt", weights_only=True)
    second = torch.load(tiny_run / "l2_h4/checkpoints/seed2/final.pt", weights_only=True)
    assert first.keys() == second.keys()
    assert any(not torch.equal(first[key], second[key]) for key in first if first[key].is_floating_point())


def test_caches_follow_the_contract(tiny_run):
    from headstab.activations.reader import open_cache

    with open_cache(tiny_run / "l2_h4/caches/seed1.h5") as cache:
        assert cache.prompt_sets() == list(PROMPT_SETS)
        lengths = cache.lengths("primary")
        patterns = cache.hook_pattern("primary")
        assert patterns.shape[:3] == (2, 6, 4)
        for prompt, length in enumerate(lengths):
            block = patterns[:, prompt, :, :length, :length]
            # post-softmax rows: float32 sums of at most `length` probabilities
            np.testing.assert_allclose(block.sum(axis=-1), 1.0, atol=reduction_atol(np.float32, int(length)))
            assert not patterns[:, prompt, :, length:, :].any() and not patterns[:, prompt, :, :, length:].any()


def test_similarity_files_and_stability_tables(tiny_run):
    from headstab.activations.reader import open_cache
    from headstab.similarity.pairs import read_pair_similarity

    for arch in ARCHITECTURES:
        for promptset in PROMPT_SETS:
            similarity, seeds = read_pair_similarity(tiny_run / arch / "similarity" / f"{promptset}.h5")
            assert seeds == list(SEEDS) and similarity.shape == (2, 2, 2, 4, 2, 4)
            # one symmetric Gram matrix: the mirrored blocks are equal exactly
            np.testing.assert_array_equal(similarity[0, 1], similarity[1, 0].transpose(2, 3, 0, 1))
            # a head compared with itself has similarity 1, up to float32 sums over its lower triangles
            with open_cache(tiny_run / arch / "caches/seed1.h5") as cache:
                lengths = cache.lengths(promptset).astype(np.int64)
            n_features = int((lengths * (lengths + 1) // 2).sum())
            np.testing.assert_allclose(
                np.einsum("lhlh->lh", similarity[0, 0]), 1.0, atol=reduction_atol(np.float32, n_features)
            )
        heads = pd.read_csv(tiny_run / arch / "tables/head_stability.csv")
        assert set(heads["promptset"]) == set(PROMPT_SETS)
        assert set(heads["scope"]) == {"same_layer", "cross_layer"}
        slack = reduction_atol(np.float32, 2 * 10**4)  # generous: every prompt set's lower triangles
        assert heads["stability"].between(-slack, 1 + slack).all()
        same = heads[heads.scope == "same_layer"].set_index(["promptset", "anchor_seed", "layer", "head"])["stability"]
        cross = heads[heads.scope == "cross_layer"].set_index(["promptset", "anchor_seed", "layer", "head"])[
            "stability"
        ]
        assert (cross >= same).all(), "searching all layers can only find a better match (same values, exactly)"
        alignment = pd.read_csv(tiny_run / arch / "tables/alignment_map.csv")
        sums = alignment.groupby(["promptset", "anchor_seed", "layer"])["fraction"].sum()
        np.testing.assert_allclose(sums, 1.0, atol=reduction_atol(np.float64, 64))
        for name in (
            "head_stability",
            "layer_stability",
            "pair_stability",
            "cross_layer_stability",
            "alignment_map",
            "commonness",
        ):
            assert (tiny_run / arch / "figures" / f"{name}.png").stat().st_size > 0


def test_every_figure_has_the_record_of_its_bytes(tiny_run):
    """write_figure_records: the workflow's figures each beside its record, which vouches for exactly it."""
    from headstab.fileio import sha256_file
    from headstab.table_files import read_file_record

    figures = sorted(tiny_run.rglob("figures/*.png"))
    assert len(figures) >= 20
    for figure in figures:
        record = read_file_record(figure)
        assert (record["figure"], record["sha256"]) == (figure.name, sha256_file(figure)), figure
        assert record["rule"] and record["inputs"], figure


def test_nothing_left_to_do_after_the_run(tiny_run):
    result = tiny_snakemake(tiny_run, "-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Nothing to be done" in result.stdout + result.stderr or "job" not in (result.stdout + result.stderr).lower()


def test_section_outputs(tiny_run):
    for arch in ARCHITECTURES:
        for name in ("weight_norm_correlation", "prompt_length", "residual_stream", "ablation_correlation"):
            assert (tiny_run / arch / "figures" / f"{name}.png").stat().st_size > 0
        cka = pd.read_csv(tiny_run / arch / "tables/residual_cka.csv")
        assert list(cka.columns) == ["promptset", "positions", "seed_a", "seed_b", "layer", "cka", "init_cka"]
        assert cka[["cka", "init_cka"]].stack().between(0, 1 + 1e-6).all()
        assert len(cka) == 2 * 2 and set(cka["positions"]) == {"all", "no_bos"}  # 1 pair x 2 layers x positions
        ablation = pd.read_csv(tiny_run / arch / "tables/ablation.csv")
        assert list(ablation.columns[:6]) == ["seed", "layer", "head", "ppl_ablated", "delta_ppl", "stability"]
        assert len(ablation) == 2 * 4
        lengths = pd.read_csv(tiny_run / arch / "tables/prompt_length.csv")
        assert set(lengths["prompt_length"]) == {5, 10}
    compare = tiny_run / "compare" / "l2_h4"
    for name in ("optimizer_stability", "activation_norms", "perplexity"):
        assert (compare / "figures" / f"{name}.png").stat().st_size > 0
    perplexity = pd.read_csv(compare / "tables/perplexity.csv")
    refits = perplexity[perplexity["scope"] == "refit"]
    assert set(refits["architecture"]) == set(ARCHITECTURES) and (refits["value"] > 1).all()
    summary = tiny_run / "summary"
    for name in ("stability_gap", "extreme_layer_depth", "meta_sne"):
        assert (summary / "figures" / f"{name}.png").stat().st_size > 0
    gap = pd.read_csv(summary / "tables/stability_gap.csv")
    assert set(gap["architecture"]) == set(ARCHITECTURES)
    assert (gap["delta_s"] >= 0).all() and gap["r_max"].between(0.5, 1).all()


def test_controls_for_sharpness_and_chance_reach_the_tables(tiny_run):
    for arch in ARCHITECTURES:
        heads = pd.read_csv(tiny_run / arch / "tables/head_stability.csv")
        assert heads["entropy"].between(0, 1).all()  # every prompt set, both scopes
        same = heads[heads["scope"] == "same_layer"]
        primary = same[same["promptset"] == "primary"]
        assert primary[["stability_content", "stability_content_null"]].notna().all().all()
        assert same[same["promptset"] != "primary"]["stability_content"].isna().all()  # the primary set only
        common = pd.read_csv(tiny_run / arch / "tables/commonness.csv")
        assert common[["commonness_null", "commonness_excl_self_above_null"]].notna().all().all()
        joint = pd.read_csv(tiny_run / arch / "tables/stability_commonness.csv")
        # 2 layers: a partial correlation over layers is +-1 by construction, so no test, and the table says why
        assert joint["p_value"].isna().all() and joint["reason"].str.startswith("2 layers").all()
        partial = pd.read_csv(tiny_run / arch / "tables/weight_norm_partial.csv")
        assert set(partial["layer"]) == {0, 1} and (partial["matrix"] == "W_Q").all()
    joint = pd.read_csv(tiny_run / "summary/tables/stability_commonness.csv")
    assert set(joint["architecture"]) == set(ARCHITECTURES) and joint["q_value"].isna().all()
    gap = pd.read_csv(tiny_run / "summary/tables/stability_gap.csv")
    assert (gap["delta_s_prompt_null"] >= 0).all() and gap["delta_s_above_null"].notna().all()
    # two refits: too few for per-refit pseudo-values, so the layer tests say so instead of testing
    layer_tests = pd.read_csv(tiny_run / "summary/tables/layer_tests.csv")
    assert layer_tests["p_value"].isna().all() and (layer_tests["calibration"] == "descriptive").all()
    assert (layer_tests["note"] == "per-refit pseudo-values need at least 3 refits; this architecture has 2").all()
    depth = pd.read_csv(tiny_run / "summary/tables/stability_gap_depth.csv")
    assert (
        set(depth["quantity"]) >= {"delta_s", "delta_s_above_null"} and depth["spearman_rho"].isna().all()
    )  # one depth
    assert depth["p_value"].isna().all()
    mantel = pd.read_csv(tiny_run / "summary/tables/meta_sne_mantel.csv")  # 2-layer refits: no depth order
    assert mantel["p_value"].isna().all() and mantel["note"].str.startswith("needs refits of at least 3 layers").all()
    tests = pd.read_csv(tiny_run / "compare/l2_h4/tables/optimizer_tests.csv")
    # two refits: too few for per-seed pseudo-values, so the twins are tested unpaired and say so
    assert (tests["design"] == "unpaired").all() and "layer_above_null" in set(tests["statistic"])


def test_the_cross_layer_null_and_the_content_share_reach_the_tables(tiny_run):
    from headstab.similarity.pairs import read_pair_similarity_null

    for arch in ARCHITECTURES:
        null, partners = read_pair_similarity_null(tiny_run / arch / "similarity/primary.h5")
        assert null.shape == (2, 2, 2, 4, 2, 4) and partners.size > 0
        assert all(read_pair_similarity_null(tiny_run / arch / "similarity" / f"{s}.h5") is None
                   for s in PROMPT_SETS if s != "primary")  # fmt: skip
        heads = pd.read_csv(tiny_run / arch / "tables/head_stability.csv")
        cross = heads[(heads["scope"] == "cross_layer") & (heads["promptset"] == "primary")]
        assert cross[["null", "above_null", "p_value", "q_value", "null_quantile"]].notna().all().all()
        # two refits: one pair refit per anchor, so p is 1/2 or 1, and the test is descriptive at n = 2
        assert cross["p_value"].isin([0.5, 1.0]).all() and (cross["p_calibration"] == "descriptive").all()
        assert heads[heads["promptset"] != "primary"]["p_value"].isna().all()
        same = heads[(heads["scope"] == "same_layer") & (heads["promptset"] == "primary")]
        assert same["content_share"].between(0, 1.5).all()
        alignment = pd.read_csv(tiny_run / arch / "tables/alignment_map.csv")
        primary = alignment[alignment["promptset"] == "primary"]
        sums = primary.groupby(["anchor_seed", "layer"])["fraction_null"].sum()
        np.testing.assert_allclose(sums, 1.0, atol=reduction_atol(np.float64, 64))
        dispersion = pd.read_csv(tiny_run / arch / "tables/alignment_dispersion.csv")
        assert dispersion.loc[dispersion["promptset"] == "primary", "diagonal_share_null"].between(0, 1).all()


def test_neuron_universality_of_both_refits_reaches_the_tables(tiny_run):
    """Each architecture's one refit pair: its statistics file holds the tokens the maxima record, both scopes'
    shares per layer sit beside their null share, every neuron of both anchors has a row, and the summary sets
    the four (architecture, layer) units' heads beside their neurons with an exact 2! x 2! permutation p."""
    from headstab.neurons.statistics_files import load_pair_statistics

    for arch in ("l2_h4", "l2_h4_wd"):
        with np.load(tiny_run / arch / "neurons/maxima.npz") as maxima:
            n_tokens = int(maxima["n_tokens"])
            assert list(maxima["refits"]) == ["1", "2"] and maxima["max_cross_layer"].shape == (2, 2, 2, 64)
        pair = load_pair_statistics(tiny_run / arch / "neurons/pairs/seed1_seed2.npz", expected_tokens=n_tokens)
        assert (pair.anchor, pair.other, pair.scope) == ("1", "2", "cross_layer") and 0 < n_tokens <= 1024
        shares = pd.read_csv(tiny_run / arch / "tables/neuron_universality.csv")
        assert sorted(zip(shares["scope"], shares["layer"])) == [
            (scope, layer) for scope in ("cross_layer", "same_layer") for layer in (0, 1)
        ]
        assert (shares["n_refits"] == 2).all() and (shares["n_tokens"] == n_tokens).all()
        assert shares["ci_low"].isna().all() and shares["null_share"].notna().all()  # 2 refits: no interval
        scores = pd.read_csv(tiny_run / arch / "tables/neuron_scores.csv")
        assert len(scores) == 2 * 2 * 2 * 64  # scopes x anchors x layers x neurons
        depth = pd.read_csv(tiny_run / arch / "tables/neuron_depth_tests.csv")  # 2 refits of 2 layers: no test
        assert sorted(depth["scope"]) == ["cross_layer", "same_layer"] and depth["p_value"].isna().all()
        assert depth["note"].str.contains("at least 3 refits").all()
        assert (tiny_run / arch / "figures/neuron_universality.png").stat().st_size > 0
    layers = pd.read_csv(tiny_run / "summary/tables/head_neuron_layers.csv")
    assert sorted(zip(layers["architecture"], layers["layer"])) == [
        ("l2_h4", 0),
        ("l2_h4", 1),
        ("l2_h4_wd", 0),
        ("l2_h4_wd", 1),
    ]
    correlation = pd.read_csv(tiny_run / "summary/tables/head_neuron_correlation.csv")
    assert len(correlation) == 4 and (correlation["calibration"] == "descriptive").all()
    finite = correlation["p_value"].notna()
    assert (correlation.loc[finite, "n_permutations"] == 4).all() and correlation.loc[finite, "exact"].all()
    assert (tiny_run / "summary/figures/head_neuron_layers.png").stat().st_size > 0
