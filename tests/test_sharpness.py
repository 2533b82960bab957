"""Normalised row entropy of causal patterns: 1 for even attention, 0 for one key, by hand in between."""

from __future__ import annotations

import numpy as np
from helpers.tolerances import reduction_atol

from headstab.sharpness import normalised_row_entropy


def _uniform_causal(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def test_even_attention_scores_one_and_attention_to_one_key_scores_zero():
    assert np.isclose(normalised_row_entropy(_uniform_causal(7)), 1.0, atol=reduction_atol(np.float64, 7))
    previous_token = np.eye(6, k=-1)
    previous_token[0, 0] = 1.0
    assert normalised_row_entropy(previous_token) == 0.0


def test_a_row_worked_by_hand():
    pattern = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.25, 0.25]])
    # row 1: ln 2 / ln 2 = 1; row 2: (0.5 ln 2 + 0.5 ln 4) / ln 3 = 1.5 ln 2 / ln 3
    expected = (1.0 + 1.5 * np.log(2) / np.log(3)) / 2
    assert np.isclose(normalised_row_entropy(pattern), expected, atol=reduction_atol(np.float64, 3))


def test_padding_beyond_length_is_never_read_and_leading_axes_are_kept():
    padded = np.zeros((2, 3, 5, 5))
    padded[..., :3, :3] = _uniform_causal(3)
    padded[..., 3:, :] = 1.0  # garbage in the padding rows and columns
    out = normalised_row_entropy(padded, length=3)
    assert out.shape == (2, 3) and np.allclose(out, 1.0, atol=reduction_atol(np.float64, 3))


def test_fewer_than_two_tokens_have_no_entropy():
    assert np.isnan(normalised_row_entropy(np.ones((4, 1, 1)))).all()
    assert np.isnan(normalised_row_entropy(_uniform_causal(4), length=1))


def _random_causal(rng, n_rows, length, scale=2.0):
    scores = np.where(np.tri(length, dtype=bool), rng.normal(scale=scale, size=(n_rows, length, length)), -np.inf)
    pattern = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return pattern / pattern.sum(axis=-1, keepdims=True)


def _packed(patterns):
    """[row, entry] packed lower triangles of a list of [row, T, T] patterns, and the offsets."""
    from headstab.activations.packing import lower_triangle_offsets

    lengths = np.array([p.shape[-1] for p in patterns])
    block = np.concatenate([p[:, *np.tril_indices(p.shape[-1])] for p in patterns], axis=1).astype(np.float32)
    return np.ascontiguousarray(block), lengths, lower_triangle_offsets(lengths)


def test_packed_row_entropy_equals_the_entropy_of_each_unpacked_prompt():
    from headstab.sharpness import packed_row_entropy

    rng = np.random.default_rng(0)
    patterns = [_random_causal(rng, 3, length) for length in (4, 1, 7, 2)]
    block, lengths, offsets = _packed(patterns)
    out = packed_row_entropy(block, lengths, offsets)
    assert out.shape == (3, 4) and np.isnan(out[:, 1]).all()
    np.testing.assert_array_equal(packed_row_entropy(block, lengths, offsets, rows_per_chunk=2), out)  # chunks
    for p in (0, 2, 3):
        expected = normalised_row_entropy(patterns[p].astype(np.float32))
        np.testing.assert_allclose(out[:, p], expected, atol=reduction_atol(np.float32, 7, magnitude=np.log(7)))


def test_position_template_averages_every_prompt_that_reaches_an_entry_by_hand():
    from headstab.sharpness import position_template

    short = np.array([[[1.0, 0.0], [0.25, 0.75]]])
    long = np.array([[[1.0, 0.0, 0.0], [0.75, 0.25, 0.0], [0.2, 0.3, 0.5]]])
    block, lengths, offsets = _packed([short, long])
    template, support = position_template(block, lengths, offsets)
    assert support.tolist() == [2, 2, 2, 1, 1, 1]
    np.testing.assert_allclose(template[0], [1.0, 0.5, 0.5, 0.2, 0.3, 0.5], atol=reduction_atol(np.float32, 2))


def _four_prompts():
    """Prompts A, B, C, D of lengths 2, 3, 3, 2 (one row): the halves are {A, B} (anchor) and {C, D} (candidate),
    the partners A <-> D and B <-> C."""
    a = np.array([[[1.0, 0.0], [0.25, 0.75]]])
    b = np.array([[[1.0, 0.0, 0.0], [0.75, 0.25, 0.0], [0.2, 0.3, 0.5]]])
    c = np.array([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.1, 0.1, 0.8]]])
    d = np.array([[[1.0, 0.0], [0.4, 0.6]]])
    return _packed([a, b, c, d])


def test_content_templates_leave_out_the_prompt_and_its_partner_by_hand():
    from headstab.sharpness import content_remainders, content_share, empty_template_entries, template_halves
    from headstab.similarity.prompt_groups import null_partners

    block, lengths, offsets = _four_prompts()
    partners = null_partners(lengths, seed=0)
    assert partners.tolist() == [3, 2, 1, 0] and template_halves(lengths).tolist() == [False, False, True, True]
    own, partner = content_remainders(block, lengths, offsets, partners)
    atol = reduction_atol(np.float32, 2)
    # A: anchor half without A and D is {B}; candidate half without them is {C}, compared on A's 2 rows.
    np.testing.assert_allclose(own[0, 0:3], [0.0, -0.5, 0.5], atol=atol)
    np.testing.assert_allclose(partner[0, 0:3], [0.0, -0.1, 0.1], atol=atol)  # D - C[:2 rows]
    # B: {A} reaches rows 0-1 only, so B's row 2 has no template: zero; its partner C less {D}.
    np.testing.assert_allclose(own[0, 3:9], [0.0, 0.5, -0.5, 0.0, 0.0, 0.0], atol=atol)
    np.testing.assert_allclose(partner[0, 3:9], [0.0, 0.1, -0.1, 0.0, 0.0, 0.0], atol=atol)
    np.testing.assert_allclose(own[0, 9:15], [0.0, 0.25, -0.25, 0.0, 0.0, 0.0], atol=atol)  # C less {A}
    np.testing.assert_allclose(partner[0, 9:15], [0.0, 0.35, -0.35, 0.0, 0.0, 0.0], atol=atol)  # B less {D}
    np.testing.assert_allclose(own[0, 15:18], [0.0, -0.35, 0.35], atol=atol)  # D less {B}
    np.testing.assert_allclose(partner[0, 15:18], [0.0, -0.25, 0.25], atol=atol)  # A less {C}
    assert empty_template_entries(lengths, partners) == 6  # row 2 of B and of C
    share = content_share(block, own, offsets)
    expected = [np.sqrt(0.5 / (1 + 0.25**2 + 0.75**2)), np.sqrt(0.5 / (1 + 0.75**2 + 0.25**2 + 0.38))]
    np.testing.assert_allclose(share[0, :2], expected, atol=reduction_atol(np.float64, 6, 4.0))


def _brute_template(patterns, members, left_out, length):
    """[T, T] mean over the prompts of `members` but `left_out` of rows 0..T-1 of those reaching each entry."""
    total, count = np.zeros((length, length)), np.zeros((length, length))
    for k, pattern in enumerate(patterns):
        if members[k] and k not in left_out:
            t = min(pattern.shape[-1], length)
            total[:t, :t] += pattern[0, :t, :t]
            count[:t, :t] += 1
    return np.divide(total, count, out=np.zeros_like(total), where=count > 0), count > 0


def test_content_templates_equal_a_mean_built_without_the_two_prompts():
    from headstab.sharpness import content_remainders, template_halves
    from headstab.similarity.prompt_groups import null_partners

    rng = np.random.default_rng(3)
    patterns = [_random_causal(rng, 1, t) for t in (6, 4, 9, 6, 7, 4, 9, 5, 8, 6)]
    block, lengths, offsets = _packed(patterns)
    partners = null_partners(lengths, seed=2)
    candidate_half = template_halves(lengths)
    assert abs(int(candidate_half.sum()) - lengths.size // 2) <= 1
    own, partner = content_remainders(block, lengths, offsets, partners)
    lower = lambda t: np.tril_indices(t)  # noqa: E731
    for p, q in enumerate(partners):
        t, keep = lengths[p], min(lengths[p], lengths[q])
        template, reached = _brute_template(patterns, ~candidate_half, (p, q), t)
        expected = np.where(reached, patterns[p][0] - template, 0.0)[lower(t)]
        np.testing.assert_allclose(own[0, offsets[p] : offsets[p + 1]], expected, atol=reduction_atol(np.float32, 10))
        template, reached = _brute_template(patterns, candidate_half, (p, q), keep)
        expected = np.where(reached, patterns[q][0, :keep, :keep] - template, 0.0)[lower(keep)]
        width = keep * (keep + 1) // 2
        np.testing.assert_allclose(
            partner[0, offsets[p] : offsets[p] + width], expected, atol=reduction_atol(np.float32, 10)
        )
        assert np.all(partner[0, offsets[p] + width : offsets[p + 1]] == 0.0)


def test_a_head_that_attends_by_position_alone_has_no_content_left():
    from headstab.sharpness import content_remainders, content_share
    from headstab.similarity.prompt_groups import null_partners

    rng = np.random.default_rng(1)
    positional = _random_causal(rng, 1, 9)[0]  # one fixed pattern, every prompt's first T rows
    patterns = [np.stack([positional[:t, :t], _random_causal(rng, 1, t)[0]]) for t in (5, 9, 7, 9, 6, 5, 7)]
    block, lengths, offsets = _packed(patterns)
    own, partner = content_remainders(block, lengths, offsets, null_partners(lengths, seed=0))
    assert np.all(own[0] == 0.0) and np.all(partner[0] == 0.0)  # the mean of equal rows is the row, exactly
    assert np.abs(own[1]).max() > 0.1  # a head with content keeps it
    share = content_share(block, own, offsets)
    assert np.all(share[0] == 0.0) and np.all(share[1] > 0.1)
