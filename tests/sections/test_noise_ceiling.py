"""headstab.sections.noise_ceiling: within-refit reliability of head types on two probe halves, cross-seed agreement
against it, and head stability's ceiling of 1 by construction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.tolerances import reduction_atol

from headstab.activations.packing import lower_triangle_offsets, n_lower_entries
from headstab.head_type_thresholds import fixed_thresholds, type_heads
from headstab.head_types import CRITERIA, HEAD_TYPES, SCORE_COLUMNS
from headstab.sections.noise_ceiling import (
    CEILING_COLUMNS,
    CEILING_METHOD,
    CEILING_STATISTICS,
    noise_ceiling_table,
    spearman_brown,
)
from headstab.similarity.prompt_groups import layer_group_similarity, null_partners, prompt_groups
from headstab.statistics.bootstrap import draw_resamples, percentile_interval
from headstab.statistics.calibration import DESCRIPTIVE, METHODS

THRESHOLD = 0.4
OPTIONS = {"n_boot": 200, "seed": 0, "confidence": 0.95}


def typed(scores: np.ndarray, seeds, score: str = "previous_token") -> pd.DataFrame:
    """type_heads rows of refits `seeds` whose `score` is scores [refit, layer, head], the other attention scores 0
    and copying 1, by THRESHOLD at every layer."""
    refit, layer, head = (axis.ravel() for axis in np.indices(scores.shape))
    table = pd.DataFrame({"refit": np.asarray(seeds)[refit], "layer": layer, "head": head})
    table = table.assign(**dict.fromkeys(SCORE_COLUMNS, 0.0)).assign(copying=1.0, **{score: scores.ravel()})
    return type_heads(table, fixed_thresholds(dict.fromkeys(CRITERIA, THRESHOLD), scores.shape[1], {}))


def pair_rows(best: np.ndarray, seeds) -> pd.DataFrame:
    """Same-layer pair_stability rows from best [anchor, pair, layer, head] (the pair refit's head)."""
    rows = [
        (seeds[a], seeds[b], layer, head, layer, int(best[a, b, layer, head]))
        for a, b, layer, head in np.ndindex(best.shape)
        if a != b
    ]
    return pd.DataFrame(rows, columns=["anchor_seed", "pair_seed", "layer", "head", "best_layer", "best_head"])


def rows_of(table: pd.DataFrame, name: str = "previous_token", layer: int = 0) -> pd.DataFrame:
    return table[(table["type"] == name) & (table["layer"] == layer)].set_index("statistic")


def identity_partners(n_refits: int, n_layers: int, n_heads: int) -> np.ndarray:
    return np.broadcast_to(np.arange(n_heads), (n_refits, n_refits, n_layers, n_heads)).copy()


def test_a_refit_against_copies_of_itself_is_corrected_to_exactly_one_with_its_interval():
    rng = np.random.default_rng(0)
    seeds = [3, 5, 8]
    truth = rng.uniform(0.2, 0.6, size=(1, 2, 6))  # near the threshold, so halves type some heads differently
    first = np.repeat(truth + rng.normal(scale=0.1, size=truth.shape), 3, axis=0)
    second = np.repeat(truth + rng.normal(scale=0.1, size=truth.shape), 3, axis=0)
    table = noise_ceiling_table(
        typed(first, seeds), typed(second, seeds), pair_rows(identity_partners(3, 2, 6), seeds), seeds, **OPTIONS
    )
    for layer in (0, 1):
        rows = rows_of(table, layer=layer)
        assert rows.loc["reliability_label", "estimate"] < 1  # the halves disagree on some heads
        for statistic in ("corrected_label", "corrected_score"):
            estimate, low, high = rows.loc[statistic, ["estimate", "ci_low", "ci_high"]]
            assert estimate == pytest.approx(1.0, abs=1e-12) and low == pytest.approx(1.0, abs=1e-12)
            assert high == pytest.approx(1.0, abs=1e-12)
        assert rows.loc["cross_seed_label", "estimate"] == rows.loc["reliability_label", "estimate"]


def test_noisy_typing_with_reliability_one_half_and_agreement_one_half_is_corrected_to_one():
    """Every refit types heads 0, 1 on the first half and 0, 2 on the second (agreement 2 of 4); each head's best
    match is the next head, so anchor and partner agree on 2 of 4 either way round."""
    seeds = [1, 2, 3, 4]
    first = np.tile([0.8, 0.8, 0.0, 0.0], (4, 1, 1))
    second = np.tile([0.8, 0.0, 0.8, 0.0], (4, 1, 1))
    best = (identity_partners(4, 1, 4) + 1) % 4
    table = noise_ceiling_table(typed(first, seeds), typed(second, seeds), pair_rows(best, seeds), seeds, **OPTIONS)
    rows = rows_of(table)
    assert rows.loc["reliability_label", "estimate"] == 0.5 and rows.loc["typed_share", "estimate"] == 0.75
    assert rows.loc["cross_seed_label", "estimate"] == 0.5
    assert rows.loc["corrected_label", "estimate"] == 1.0
    # the scores' split-half r is 0: no reliability to correct by
    assert rows.loc["reliability_score", "estimate"] == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(rows.loc["corrected_score", "estimate"])


def test_types_that_agree_across_refits_no_better_than_chance_are_corrected_below_one():
    """Halves agree on every head (reliability 1); partners are heads of the other label half the time."""
    seeds = [1, 2]
    scores = np.tile([0.8, 0.8, 0.0, 0.0], (2, 1, 1))
    best = identity_partners(2, 1, 4)
    best[..., :] = [0, 2, 1, 3]  # head 1 -> untyped head 2, head 2 -> typed head 1
    table = noise_ceiling_table(typed(scores, seeds), typed(scores, seeds), pair_rows(best, seeds), seeds, **OPTIONS)
    rows = rows_of(table)
    assert rows.loc["reliability_label", "estimate"] == 1.0 and rows.loc["reliability_score", "estimate"] == 1.0
    assert rows.loc["cross_seed_label", "estimate"] == rows.loc["corrected_label", "estimate"] == 0.5
    # x = (.8, .8, 0, 0), y = (.8, 0, .8, 0) per direction: r = 0
    assert rows.loc["corrected_score", "estimate"] == pytest.approx(0.0, abs=1e-12)
    # two refits: every resample draws both once, so there is no interval
    assert table[["ci_low", "ci_high"]].isna().all().all()


def reference(first, second, best, layer, counts=None):
    """Loop form of every statistic's estimate for previous_token at `layer` (scores [refit, layer, head]); with
    counts [refit], of the resample that holds refit a counts[a] times: its copies are refits of their own, paired
    with every copy of every other refit (never with a copy of itself)."""
    copies = np.repeat(np.arange(first.shape[0]), np.ones(first.shape[0], int) if counts is None else counts)
    first, second, best = first[copies], second[copies], best[np.ix_(copies, copies)]
    label = lambda s: s > THRESHOLD  # noqa: E731
    within_x, within_y = first[:, layer].ravel(), second[:, layer].ravel()
    cross_x, cross_y, anchors, partners, cross_agree = [], [], [], [], []
    for a, b in zip(*np.nonzero(copies[:, None] != copies[None, :]), strict=True):
        for head in range(first.shape[2]):
            p = best[a, b, layer, head]
            for x_half, y_half in ((first, second), (second, first)):
                cross_x.append(x_half[a, layer, head])
                cross_y.append(y_half[b, layer, p])
                cross_agree.append(label(x_half[a, layer, head]) == label(y_half[b, layer, p]))
            anchors.append((first[a, layer, head], second[a, layer, head]))
            partners.append((first[b, layer, p], second[b, layer, p]))
    anchors, partners = np.array(anchors), np.array(partners)
    r = lambda x, y: np.corrcoef(np.r_[x, y], np.r_[y, x])[0, 1]  # noqa: E731  (double entry)
    own = [np.mean(label(u[:, 0]) == label(u[:, 1])) for u in (anchors, partners)]
    r_xx, r_yy = r(anchors[:, 0], anchors[:, 1]), r(partners[:, 0], partners[:, 1])
    return {
        "typed_share": np.mean(label(within_x) | label(within_y)),
        "reliability_label": np.mean(label(within_x) == label(within_y)),
        "reliability_score": r(within_x, within_y),
        "reliability_score_full": 2 * r(within_x, within_y) / (1 + r(within_x, within_y)),
        "cross_seed_label": np.mean(cross_agree),
        "cross_seed_score": r(cross_x, cross_y),
        "corrected_label": np.mean(cross_agree) / np.sqrt(own[0] * own[1]),
        "corrected_score": r(cross_x, cross_y) / np.sqrt(r_xx * r_yy) if r_xx > 0 and r_yy > 0 else np.nan,
    }


def random_case(rng, n=4, n_layers=2, n_heads=5):
    seeds = list(range(10, 10 + n))
    truth = rng.uniform(0.1, 0.7, size=(n, n_layers, n_heads))
    first, second = (truth + rng.normal(scale=0.1, size=truth.shape) for _ in range(2))
    best = rng.integers(n_heads, size=(n, n, n_layers, n_heads))
    return seeds, first, second, best


def test_every_estimate_equals_its_loop_form_and_every_row_is_descriptive():
    seeds, first, second, best = random_case(np.random.default_rng(1))
    table = noise_ceiling_table(typed(first, seeds), typed(second, seeds), pair_rows(best, seeds), seeds, **OPTIONS)
    assert list(table.columns) == CEILING_COLUMNS
    assert len(table) == len(HEAD_TYPES) * 2 * len(CEILING_STATISTICS)
    assert (table["calibration"] == DESCRIPTIVE).all() and (table["threshold_rule"] == "fixed").all()
    atol = reduction_atol(np.float64, 4 * 3 * 5 * 2, magnitude=10.0)
    for layer in (0, 1):
        rows = rows_of(table, layer=layer)
        for statistic, expected in reference(first, second, best, layer).items():
            assert rows.loc[statistic, "estimate"] == pytest.approx(expected, abs=atol), statistic
        assert rows.loc["reliability_label", "n"] == 4 * 5 and rows.loc["cross_seed_score", "n"] == 4 * 3 * 5
        assert rows.loc["reliability_score", "relative_depth"] == (layer + 1) / 2
    varied = table[table["type"] == "previous_token"]
    assert varied[["estimate", "ci_low", "ci_high"]].notna().all().all()
    assert (varied["ci_low"] <= varied["estimate"]).all() and (varied["estimate"] <= varied["ci_high"]).all()
    # the other scores are 0 on every head: their labels agree, their r is undefined
    constant = table[table["type"] != "previous_token"].set_index("statistic")
    assert constant.loc[["reliability_label", "cross_seed_label", "corrected_label"], "estimate"].eq(1.0).all()
    assert constant.loc["typed_share", "estimate"].eq(0.0).all()  # ... trivially: no head has the type
    assert constant.loc[["reliability_score", "cross_seed_score", "corrected_score"], "estimate"].isna().all()


def test_the_interval_follows_resampled_refits():
    """A refit whose halves disagree widens the reliability's interval; refits that all agree give a point."""
    seeds = [1, 2, 3, 4]
    scores = np.tile([0.8, 0.8, 0.0, 0.0], (4, 1, 1))
    flipped = scores.copy()
    flipped[0, 0] = [0.0, 0.0, 0.8, 0.8]  # refit 1's halves disagree on every head
    pairs = pair_rows(identity_partners(4, 1, 4), seeds)
    steady = rows_of(noise_ceiling_table(typed(scores, seeds), typed(scores, seeds), pairs, seeds, **OPTIONS))
    assert steady.loc["reliability_label", ["ci_low", "ci_high"]].tolist() == [1.0, 1.0]
    shaken = rows_of(noise_ceiling_table(typed(scores, seeds), typed(flipped, seeds), pairs, seeds, **OPTIONS))
    low, high = shaken.loc["reliability_label", ["ci_low", "ci_high"]]
    assert shaken.loc["reliability_label", "estimate"] == 0.75
    # a resample holds refit 1 0 to 3 times out of 4 (never 4: at least two distinct refits)
    assert low == 0.25 and high == 1.0


def test_every_interval_is_the_percentile_interval_of_its_loop_form_over_the_same_refit_resamples():
    """Refit resamples of draw_resamples(n_boot, refits, 1, seed): a refit's units count k_a times, a pair's
    k_a k_b times; each statistic recomputed on the resample, its NaNs left out, at the confidence asked for."""
    seeds, first, second, best = random_case(np.random.default_rng(4))
    options = {"n_boot": 40, "seed": 7, "confidence": 0.8}
    table = noise_ceiling_table(typed(first, seeds), typed(second, seeds), pair_rows(best, seeds), seeds, **options)
    counts = draw_resamples(40, len(seeds), 1, 7).refit_counts
    atol = reduction_atol(np.float64, 4 * 4 * 3 * 5 * 2, magnitude=10.0)
    for layer in (0, 1):
        rows = rows_of(table, layer=layer)
        replicates = [reference(first, second, best, layer, k) for k in counts]
        for statistic in CEILING_STATISTICS:
            values = np.array([replicate[statistic] for replicate in replicates])
            low, high = percentile_interval(values[np.isfinite(values)], 0.8)
            assert rows.loc[statistic, ["ci_low", "ci_high"]].tolist() == pytest.approx([low, high], abs=atol), (
                statistic
            )


def test_a_score_rescaled_keeps_every_correlation():
    """r is free of the score's scale: scores a thousandth as large (so no head is typed) have the same r."""
    seeds, first, second, best = random_case(np.random.default_rng(5))
    pairs = pair_rows(best, seeds)
    table = noise_ceiling_table(typed(first, seeds), typed(second, seeds), pairs, seeds, **OPTIONS)
    small = noise_ceiling_table(typed(first / 1000, seeds), typed(second / 1000, seeds), pairs, seeds, **OPTIONS)
    assert rows_of(small).loc["typed_share", "estimate"] == 0.0 < rows_of(table).loc["typed_share", "estimate"]
    scores = ["reliability_score", "reliability_score_full", "cross_seed_score", "corrected_score"]
    atol = reduction_atol(np.float64, 4 * 3 * 5 * 2, magnitude=10.0)
    for layer in (0, 1):
        np.testing.assert_allclose(
            rows_of(small, layer=layer).loc[scores, "estimate"], rows_of(table, layer=layer).loc[scores, "estimate"],
            rtol=0, atol=atol,
        )  # fmt: skip


def test_a_score_that_varies_below_the_rounding_of_its_sums_has_no_correlation():
    """Every score 0.9, every other head's 0.9 + 8.9e-7: the variance, 2e-13, is below 1e-12 of the mean square
    (0.81), where n x^2 - (sum x)^2 is rounding; r is NaN, not the 1 that the two identical halves would give."""
    seeds = [1, 2, 3]
    scores = np.full((3, 1, 4), 0.9)
    scores[..., ::2] += 8.9e-7
    table = noise_ceiling_table(
        typed(scores, seeds), typed(scores, seeds), pair_rows(identity_partners(3, 1, 4), seeds), seeds, **OPTIONS
    )
    rows = rows_of(table)
    assert rows.loc["reliability_label", "estimate"] == 1.0
    assert rows.loc[["reliability_score", "cross_seed_score", "corrected_score"], "estimate"].isna().all()
    # a hundred times the spread is a score that varies
    scores[..., ::2] += 8.9e-5
    varied = noise_ceiling_table(
        typed(scores, seeds), typed(scores, seeds), pair_rows(identity_partners(3, 1, 4), seeds), seeds, **OPTIONS
    )
    assert rows_of(varied).loc["reliability_score", "estimate"] == pytest.approx(1.0)


def test_integer_columns_read_as_floats_give_the_same_table():
    """A CSV whose layer, head and best_head columns were written from a frame with NaN reads them as floats."""
    seeds, first, second, best = random_case(np.random.default_rng(6))
    a, b, pairs = typed(first, seeds), typed(second, seeds), pair_rows(best, seeds)
    table = noise_ceiling_table(a, b, pairs, seeds, **OPTIONS)
    floats = {"layer": float, "head": float}
    as_floats = noise_ceiling_table(
        a.astype(floats), b.astype(floats), pairs.astype({**floats, "best_layer": float, "best_head": float}), seeds,
        **OPTIONS,
    )  # fmt: skip
    pd.testing.assert_frame_equal(as_floats, table)


def test_the_calibration_label_follows_the_registry_at_the_number_of_refits(monkeypatch):
    seeds, first, second, best = random_case(np.random.default_rng(7))
    monkeypatch.setitem(METHODS, CEILING_METHOD, dataclasses.replace(METHODS[CEILING_METHOD], min_n=4))
    for n in (3, 4):
        chosen = seeds[:n]
        table = noise_ceiling_table(
            typed(first[:n], chosen), typed(second[:n], chosen), pair_rows(best[:n, :n], chosen), chosen, **OPTIONS
        )
        assert set(table["calibration"]) == {"calibrated" if n == 4 else DESCRIPTIVE}


def test_spearman_brown_corrects_a_split_half_r_to_the_whole_probe_set():
    np.testing.assert_allclose(spearman_brown([0.0, 0.5, 1.0, 0.2]), [0.0, 2 / 3, 1.0, 1 / 3])
    assert np.isnan(spearman_brown(-0.5)) and np.isnan(spearman_brown(-1.0))  # no reliability to extend


def test_halves_that_disagree_have_no_reliability_and_no_correction():
    """Each refit's second half reverses its first: the split-half r is -1 for anchors and partners alike, whose
    product is +1; the corrected r must be NaN, not -1 / sqrt(1)."""
    seeds = [1, 2, 3]
    first = np.tile([0.1, 0.2, 0.3, 0.4], (3, 1, 1))
    table = noise_ceiling_table(
        typed(first, seeds), typed(first[..., ::-1], seeds), pair_rows(identity_partners(3, 1, 4), seeds), seeds,
        **OPTIONS,
    )  # fmt: skip
    rows = rows_of(table)
    assert rows.loc["reliability_score", "estimate"] == pytest.approx(-1.0)
    assert rows.loc["cross_seed_score", "estimate"] == pytest.approx(-1.0)
    assert rows.loc[["reliability_score_full", "corrected_score"], "estimate"].isna().all()


def test_bad_inputs_name_what_to_rebuild():
    seeds, first, second, best = random_case(np.random.default_rng(2), n=3, n_layers=1, n_heads=3)
    a, b, pairs = typed(first, seeds), typed(second, seeds), pair_rows(best, seeds)
    with pytest.raises(ValueError, match="at least 2; got \\[10\\]"):
        noise_ceiling_table(a, b, pairs, [10], **OPTIONS)
    with pytest.raises(ValueError, match="second probe half's head types cover refits \\[10, 11\\]"):
        noise_ceiling_table(a, b[b["refit"] != 12], pairs, seeds, **OPTIONS)
    with pytest.raises(ValueError, match="Rebuild noise_ceiling_scores.csv"):
        noise_ceiling_table(a.assign(refit=a["refit"] + 1), b, pairs, seeds, **OPTIONS)
    with pytest.raises(ValueError, match="select scope same_layer and one promptset"):
        noise_ceiling_table(a, b, pd.concat([pairs, pairs]), seeds, **OPTIONS)
    with pytest.raises(ValueError, match="select scope same_layer"):
        noise_ceiling_table(a, b, pairs.assign(best_layer=1), seeds, **OPTIONS)
    with pytest.raises(ValueError, match="one threshold rule; got \\['fixed', 'held_out_step0'\\]"):
        noise_ceiling_table(a, b.assign(threshold_rule="held_out_step0"), pairs, seeds, **OPTIONS)


def test_head_types_outside_the_grid_or_twice_name_the_half_and_the_grid():
    seeds, first, second, best = random_case(np.random.default_rng(8), n=3, n_layers=2, n_heads=3)
    a, b, pairs = typed(first, seeds), typed(second, seeds), pair_rows(best, seeds)
    message = (
        "the {} probe half's head types cover refits \\[10, 11, 12\\] in 18 rows; the noise ceiling needs every head "
        "of refits \\[10, 11, 12\\] x 2 layers x 3 heads once. Rebuild noise_ceiling_scores.csv from the same refits "
        "as pair_stability.csv$"
    )
    with pytest.raises(ValueError, match=message.format("first")):
        noise_ceiling_table(a.assign(layer=a["layer"].where(a.index != 0, -1)), b, pairs, seeds, **OPTIONS)
    # a layer or head past the grid, a head below it, a head typed twice: each a ValueError, never an IndexError
    for column, value in (("layer", 2), ("head", 3), ("head", -1), ("head", 1)):
        bad = b.assign(**{column: b[column].where(b.index != 0, value)})
        assert bad[["refit", "layer", "head"]].duplicated().any() == (value == 1)
        with pytest.raises(ValueError, match=message.format("second")):
            noise_ceiling_table(a, bad, pairs, seeds, **OPTIONS)


def test_pair_rows_missing_unknown_or_of_one_refit_name_the_count():
    seeds, first, second, best = random_case(np.random.default_rng(9), n=3, n_layers=2, n_heads=3)
    a, b, pairs = typed(first, seeds), typed(second, seeds), pair_rows(best, seeds)
    with pytest.raises(ValueError, match="pair_stability rows \\(35\\) must give .* once \\(36 rows\\); select scope"):
        noise_ceiling_table(a, b, pairs.iloc[1:], seeds, **OPTIONS)
    first_row = pairs.index == 0
    for column, value in (("anchor_seed", 99), ("pair_seed", 99), ("pair_seed", pairs.loc[0, "anchor_seed"])):
        bad = pairs.assign(**{column: pairs[column].where(~first_row, value)})
        with pytest.raises(ValueError, match="pair_stability rows \\(36\\) must give .* once \\(36 rows\\); select"):
            noise_ceiling_table(a, b, bad, seeds, **OPTIONS)


def test_head_stability_needs_no_ceiling_a_refit_against_itself_is_one_on_every_prompt_group():
    """Stability compares patterns on the same prompts: every head of every refit (not copies) is 1 with itself."""
    rng = np.random.default_rng(3)
    lengths = np.array([5, 7, 4, 6, 5, 7, 3, 6])
    n_seeds, n_heads = 3, 4
    segments = []
    for length in lengths:  # packed lower triangles of random causal softmax patterns
        logits = np.where(
            np.tri(length, dtype=bool), rng.normal(scale=2.0, size=(n_seeds * n_heads, length, length)), -np.inf
        )
        pattern = np.exp(logits - logits.max(axis=-1, keepdims=True))
        segments.append((pattern / pattern.sum(axis=-1, keepdims=True))[:, *np.tril_indices(length)])
    block = np.ascontiguousarray(np.concatenate(segments, axis=1), dtype=np.float32)
    groups = prompt_groups(lengths.size, 4, seed=0)
    observed, _ = layer_group_similarity(
        block, lower_triangle_offsets(lengths), lengths, groups, null_partners(lengths, 0), n_seeds
    )
    self_similarity = observed[:, np.arange(n_seeds), np.arange(n_seeds)]  # [group, seed, head_a, head_b]
    atol = reduction_atol(np.float32, int(n_lower_entries(lengths.max())))
    np.testing.assert_allclose(np.diagonal(self_similarity, axis1=-2, axis2=-1), 1.0, atol=atol)
    assert np.abs(self_similarity - 1).max() > 0.05  # other heads of the same refit are not


def planted_spec(tmp_path):
    from headstab.plan.config import architecture_spec, load_config, load_yaml

    config = load_yaml("tests/config/tiny.yaml")
    arch = {"n_layers": 2, "n_heads": 4, "d_model": 256, "d_head": 64, "n_ctx": 128, "attn_only": True}
    config.update(
        results_dir=str(tmp_path / "results"),
        run={"architectures": ["planted"], "seeds": [1, 2, 3]},
        architectures={"planted": {**arch, "source": "published_local", "path": str(tmp_path / "mirror")}},
    )
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(config))
    return architecture_spec(load_config(path), "planted")


def test_planted_circuits_have_corrected_induction_agreement_of_at_least_0_95(tmp_path):
    """Refits with hand-written previous-token, BOS and induction heads at seed-dependent indices
    (tests/helpers/planted_circuits.py), each typed on two disjoint halves of one probe set; planted heads
    matched to their twins (as pair_stability.csv finds them), random heads to the partner's first random head."""
    from helpers.planted_circuits import planted_roles, planted_state_dict

    from headstab.head_types import probe_scores, probe_set, score_table
    from headstab.refits.models import build_model
    from headstab.refits.published import convert_tl2_state_dict

    spec, seeds = planted_spec(tmp_path), [1, 2, 3]
    probe = probe_set(spec.d_vocab, 0, 8, 100, bos_token=0, exclude=[0])
    thresholds = fixed_thresholds({**dict.fromkeys(CRITERIA, 0.4), "bos": 0.5, "copying": 0.5}, 2, {})
    halves = {"first": [], "second": []}
    for seed in seeds:
        model = build_model(spec, seed=0, legacy_gpt2_init=False)
        model.load_state_dict(convert_tl2_state_dict(planted_state_dict(spec, seed), spec))
        for half, part in (("first", slice(0, 4)), ("second", slice(4, 8))):
            halves[half].append(score_table(probe_scores(model.eval(), probe.rows(part)), seed))
    roles = {seed: planted_roles(spec, seed) for seed in seeds}
    best = np.zeros((3, 3, 2, 4), dtype=int)
    for a, b, layer, head in np.ndindex(best.shape):
        role = roles[seeds[a]][(layer, head)]
        best[a, b, layer, head] = next(h for h in range(4) if roles[seeds[b]][(layer, h)] == role)
    first, second = (type_heads(pd.concat(halves[h], ignore_index=True), thresholds) for h in ("first", "second"))
    table = noise_ceiling_table(first, second, pair_rows(best, seeds), seeds, **OPTIONS)
    induction = rows_of(table, "induction", layer=1)
    assert induction.loc["reliability_label", "estimate"] == 1.0
    assert induction.loc["corrected_label", "estimate"] >= 0.95
    assert induction.loc["corrected_score", "estimate"] >= 0.95, induction.to_string()
    # matching by index instead of by twin breaks the planted agreement
    shuffled = noise_ceiling_table(first, second, pair_rows(identity_partners(3, 2, 4), seeds), seeds, **OPTIONS)
    assert rows_of(shuffled, "induction", layer=1).loc["corrected_label", "estimate"] < 0.95
