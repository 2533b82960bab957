import numpy as np
import pandas as pd
import pytest
from helpers.tolerances import reduction_atol, reduction_rtol
from scipy.stats import ortho_group

from headstab.cka import (
    layer_cka_summary,
    layerwise_cka,
    linear_cka,
    pairwise_layer_cka,
    rbf_cka,
    subsample_tokens,
    token_activations,
)


def _hsic_biased(k: np.ndarray, l: np.ndarray) -> float:
    """HSIC straight from its definition: tr(K H L H) / (n-1)^2."""
    n = k.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    return np.trace(k @ h @ l @ h) / (n - 1) ** 2


def _hsic_unbiased(k: np.ndarray, l: np.ndarray) -> float:
    """Song et al. (2012) unbiased HSIC, written from the paper's formula."""
    n = k.shape[0]
    k, l = k.copy(), l.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l, 0)
    one = np.ones(n)
    term = np.trace(k @ l) + (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2)) - 2 / (n - 2) * (one @ k @ l @ one)
    return term / (n * (n - 3))


def _rbf_by_loop(x: np.ndarray, threshold: float) -> np.ndarray:
    n = x.shape[0]
    sq = np.array([[np.sum((x[i] - x[j]) ** 2) for j in range(n)] for i in range(n)])
    return np.exp(-sq / (2 * threshold**2 * np.median(sq)))


def _cka_direct(k, l, hsic):
    return hsic(k, l) / np.sqrt(hsic(k, k) * hsic(l, l))


rng = np.random.default_rng(0)
X = rng.normal(size=(40, 6))
Y = X @ rng.normal(size=(6, 5)) + 0.5 * rng.normal(size=(40, 5))
# float64 CKA of 40 tokens: HSIC sums 40^2 Gram entries, each a sum over 6 features (or an exp of one).
CKA_RTOL = reduction_rtol(np.float64, 40 * 40 * 6)


@pytest.mark.parametrize("debiased", [False, True])
def test_identical_inputs_give_one(debiased):
    assert linear_cka(X, X, debiased=debiased) == pytest.approx(1.0, rel=CKA_RTOL)
    assert rbf_cka(X, X, debiased=debiased) == pytest.approx(1.0, rel=CKA_RTOL)


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_invariant_to_orthogonal_transform_and_isotropic_scaling(kernel):
    q = ortho_group.rvs(6, random_state=1)
    f = linear_cka if kernel == "linear" else rbf_cka
    base = f(X, Y)
    assert f(X @ q, Y) == pytest.approx(base, rel=CKA_RTOL)
    assert f(3.7 * X, Y) == pytest.approx(base, rel=CKA_RTOL)
    assert f(X, 0.01 * Y) == pytest.approx(base, rel=CKA_RTOL)
    # and the value is not trivially 1: unrelated data score lower
    assert f(X, rng.normal(size=Y.shape)) < base


def test_linear_matches_direct_hsic_formula():
    expected = _cka_direct(X @ X.T, Y @ Y.T, _hsic_biased)
    assert linear_cka(X, Y) == pytest.approx(expected, rel=CKA_RTOL)


@pytest.mark.parametrize("threshold", [0.5, 1.0, 2.0])
def test_rbf_matches_direct_hsic_formula(threshold):
    k, l = _rbf_by_loop(X, threshold), _rbf_by_loop(Y, threshold)
    assert rbf_cka(X, Y, threshold=threshold) == pytest.approx(_cka_direct(k, l, _hsic_biased), rel=CKA_RTOL)
    assert rbf_cka(X, Y, threshold=threshold, debiased=True) == pytest.approx(
        _cka_direct(k, l, _hsic_unbiased), rel=CKA_RTOL
    )


def test_debiased_linear_matches_unbiased_hsic_formula():
    expected = _cka_direct(X @ X.T, Y @ Y.T, _hsic_unbiased)
    assert linear_cka(X, Y, debiased=True) == pytest.approx(expected, rel=CKA_RTOL)


def test_debiased_close_to_biased_for_large_n():
    big_rng = np.random.default_rng(3)
    x = big_rng.normal(size=(1500, 4))
    y = x @ big_rng.normal(size=(4, 4)) + big_rng.normal(size=(1500, 4))
    for f in (linear_cka, rbf_cka):
        biased, debiased = f(x, y), f(x, y, debiased=True)
        assert abs(biased - debiased) < 0.02
    # for small n the two differ clearly on unrelated data (bias of the plain estimator)
    a, b = big_rng.normal(size=(12, 30)), big_rng.normal(size=(12, 30))
    assert linear_cka(a, b) - linear_cka(a, b, debiased=True) > 0.1


def test_token_activations_drop_padding_and_stack_prompts():
    resid = np.zeros((3, 4, 2))
    lengths = np.array([2, 4, 1])
    for p, n in enumerate(lengths):
        resid[p, :n] = np.arange(n)[:, None] + 10 * p + 1
    tokens = token_activations(resid, lengths)
    assert tokens.shape == (7, 2)
    assert tokens[:, 0].tolist() == [1, 2, 11, 12, 13, 14, 21]


def test_token_activations_reject_bad_lengths():
    with pytest.raises(ValueError, match="lengths"):
        token_activations(np.zeros((2, 3, 4)), np.array([1, 5]))


def test_padding_does_not_change_cka():
    resid_a = rng.normal(size=(3, 6, 5))
    resid_b = rng.normal(size=(3, 6, 5))
    lengths = np.array([6, 4, 5])
    padded_a, padded_b = resid_a.copy(), resid_b.copy()
    for p, n in enumerate(lengths):
        padded_a[p, n:] = 0
        padded_b[p, n:] = 99.0  # garbage past the end must be ignored
    ta = token_activations(resid_a, lengths)
    assert rbf_cka(ta, token_activations(resid_b, lengths)) == pytest.approx(
        rbf_cka(token_activations(padded_a, lengths), token_activations(padded_b, lengths)), rel=CKA_RTOL
    )


def test_layerwise_and_pairwise_agree_with_single_pair():
    acts = {s: np.random.default_rng(s).normal(size=(2, 30, 4)) for s in (5, 1, 3)}
    acts[3][1] = acts[1][1] @ ortho_group.rvs(4, random_state=2)  # layer 1: same up to rotation
    per_layer = layerwise_cka(acts[1], acts[3], kernel="linear")
    assert per_layer[1] == pytest.approx(1.0, rel=reduction_rtol(np.float64, 30 * 30 * 4))
    assert per_layer[0] == pytest.approx(
        linear_cka(acts[1][0], acts[3][0]), rel=reduction_rtol(np.float64, 30 * 30 * 4)
    )
    table = pairwise_layer_cka(acts, kernel="linear")
    assert list(table.columns) == ["seed_a", "seed_b", "layer", "cka"]
    assert sorted(set(zip(table.seed_a, table.seed_b))) == [(1, 3), (1, 5), (3, 5)]
    assert len(table) == 3 * 2
    assert (table.seed_a < table.seed_b).all()
    row = table[(table.seed_a == 1) & (table.seed_b == 3)].set_index("layer").cka
    np.testing.assert_allclose(row.to_numpy(), per_layer, rtol=reduction_rtol(np.float64, 30 * 30 * 4))


def test_pairwise_rejects_mismatched_tokens():
    with pytest.raises(ValueError, match="refit 2"):
        pairwise_layer_cka({1: np.zeros((2, 10, 3)), 2: np.zeros((2, 9, 3))})


def test_subsample_tokens_even_and_bounded():
    idx = subsample_tokens(100, 10)
    assert len(idx) == 10 and idx[0] == 0 and idx[-1] == 99
    assert subsample_tokens(5, None).tolist() == [0, 1, 2, 3, 4]


def _pair_table(values_by_layer: dict[int, float], n_refits: int) -> pd.DataFrame:
    import itertools

    rows = [
        (a, b, layer, value)
        for layer, value in values_by_layer.items()
        for a, b in itertools.combinations(range(1, n_refits + 1), 2)
    ]
    return pd.DataFrame(rows, columns=["seed_a", "seed_b", "layer", "cka"])


def test_layer_summary_over_distinct_pairs_is_the_plain_mean():
    summary = layer_cka_summary(_pair_table({0: 0.7, 1: 0.4}, n_refits=5), pairs="distinct")
    assert summary["layer"].tolist() == [0, 1]
    assert summary["cka_mean"].tolist() == pytest.approx([0.7, 0.4], rel=reduction_rtol(np.float64, 10))
    assert summary["cka_std"].tolist() == pytest.approx([0.0, 0.0], abs=reduction_atol(np.float64, 10))
    assert summary["n_pairs"].tolist() == [10, 10]


def test_layer_summary_with_self_pairs_reads_high_as_the_authors_code():
    # The authors average all N^2 ordered pairs, self-pairs (CKA 1) included: 0.70 reads 0.76 at N = 5.
    summary = layer_cka_summary(_pair_table({0: 0.7}, n_refits=5), pairs="ordered_with_self")
    assert summary["cka_mean"].iloc[0] == pytest.approx((20 * 0.7 + 5) / 25, rel=reduction_rtol(np.float64, 25))
    assert summary["cka_mean"].iloc[0] == pytest.approx(0.76, rel=reduction_rtol(np.float64, 25))
    assert summary["n_pairs"].iloc[0] == 25


def test_layer_summary_rejects_an_unknown_pairing():
    with pytest.raises(ValueError, match="analysis.cka_pairs"):
        layer_cka_summary(_pair_table({0: 0.7}, n_refits=3), pairs="all")


# The workflow's path: pairwise_layer_cka with its defaults (RBF, threshold 1), debiased or not.


@pytest.mark.parametrize("debiased", [False, True])
def test_pairwise_defaults_to_rbf_at_threshold_one(debiased):
    acts = {2: X[None], 7: Y[None]}
    table = pairwise_layer_cka(acts, debiased=debiased)
    expected = rbf_cka(X, Y, threshold=1.0, debiased=debiased)
    assert table["cka"].tolist() == pytest.approx([expected], rel=CKA_RTOL)
    assert expected != pytest.approx(linear_cka(X, Y, debiased=debiased), rel=1e-3)


@pytest.mark.parametrize("debiased", [False, True])
def test_pairwise_and_layerwise_pass_threshold_and_debiasing_to_the_rbf_kernel(debiased):
    k, l = _rbf_by_loop(X, 0.5), _rbf_by_loop(Y, 0.5)
    expected = _cka_direct(k, l, _hsic_unbiased if debiased else _hsic_biased)
    table = pairwise_layer_cka([X[None], Y[None]], threshold=0.5, debiased=debiased)
    assert table[["seed_a", "seed_b", "layer"]].values.tolist() == [[0, 1, 0]]
    assert table["cka"].iloc[0] == pytest.approx(expected, rel=CKA_RTOL)
    assert layerwise_cka(X[None], Y[None], threshold=0.5, debiased=debiased)[0] == pytest.approx(expected, rel=CKA_RTOL)
    # the default threshold differs, so the value above is the threshold's
    assert layerwise_cka(X[None], Y[None], debiased=debiased)[0] != pytest.approx(expected, rel=1e-3)


def test_pairwise_max_tokens_keeps_evenly_spaced_tokens():
    keep = subsample_tokens(40, 4)
    assert keep.tolist() == [0, 13, 26, 39]
    table = pairwise_layer_cka({0: X[None], 1: Y[None]}, max_tokens=4, debiased=True, kernel="linear")
    expected = linear_cka(X[keep], Y[keep], debiased=True)
    assert table["cka"].iloc[0] == pytest.approx(expected, rel=reduction_rtol(np.float64, 4 * 4 * 6))
    assert expected != pytest.approx(linear_cka(X, Y, debiased=True), rel=1e-3)


def test_subsample_tokens_returns_integer_indices():
    idx = subsample_tokens(10, 4)
    assert idx.dtype.kind == "i"
    assert idx.tolist() == [0, 3, 6, 9]
    assert subsample_tokens(3, 3).tolist() == [0, 1, 2]  # nothing to drop, whatever the bound
    with pytest.raises(ValueError, match="max_tokens must be at least 4, got 3"):
        subsample_tokens(10, 3)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_low_precision_caches_give_the_float64_answer(dtype):
    # Caches hold float16/float32; the Gram matrices must be computed in float64 all the same.
    x, y = (5 * X).astype(dtype), (5 * Y).astype(dtype)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    for f in (linear_cka, rbf_cka):
        for debiased in (False, True):
            value = f(x, y, debiased=debiased)
            assert np.isfinite(value)
            assert value == pytest.approx(f(x64, y64, debiased=debiased), rel=CKA_RTOL)
    table = pairwise_layer_cka([x[None], y[None]])
    assert table["cka"].iloc[0] == pytest.approx(rbf_cka(x64, y64), rel=CKA_RTOL)


def test_float16_rbf_stays_finite_where_float16_distances_overflow():
    # |x|^2 of 100 * X exceeds float16's 65504: a float16 Gram would hold inf and give NaN.
    x = (100 * X).astype(np.float16)
    y = (100 * Y).astype(np.float16)
    value = rbf_cka(x, y)
    assert np.isfinite(value)
    assert value == pytest.approx(rbf_cka(x.astype(np.float64), y.astype(np.float64)), rel=CKA_RTOL)


def test_center_gram_leaves_its_input_alone_and_accepts_integer_grams():
    from headstab.cka import center_gram

    gram = np.array([[2, 1, 0, 1], [1, 3, 1, 0], [0, 1, 2, 1], [1, 0, 1, 4]])
    before = gram.copy()
    for unbiased in (False, True):
        centered = center_gram(gram, unbiased=unbiased)
        np.testing.assert_array_equal(gram, before)
        expected = center_gram(gram.astype(np.float64), unbiased=unbiased)
        np.testing.assert_allclose(centered, expected, rtol=0, atol=reduction_atol(np.float64, 16, 4.0))
    floats = gram.astype(np.float64)
    center_gram(floats, unbiased=True)
    np.testing.assert_array_equal(floats, before)
    # biased centring by hand: H K H with H = I - 1/n
    h = np.eye(4) - 1 / 4
    np.testing.assert_allclose(center_gram(floats), h @ floats @ h, atol=reduction_atol(np.float64, 16, 4.0))


def test_center_gram_of_float32_is_float64():
    from headstab.cka import center_gram

    gram = (X @ X.T).astype(np.float32)
    centered = center_gram(gram, unbiased=True)
    assert centered.dtype == np.float64
    np.testing.assert_allclose(
        centered, center_gram(gram.astype(np.float64), unbiased=True), rtol=0, atol=reduction_atol(np.float64, 40, 40.0)
    )


def test_debiased_estimator_works_from_exactly_four_tokens():
    x4, y4 = X[:4], Y[:4]
    expected = _cka_direct(x4 @ x4.T, y4 @ y4.T, _hsic_unbiased)
    assert linear_cka(x4, y4, debiased=True) == pytest.approx(expected, rel=reduction_rtol(np.float64, 16 * 6))
    with pytest.raises(ValueError, match="the debiased estimator needs at least 4 tokens, got 3"):
        linear_cka(X[:3], Y[:3], debiased=True)
    with pytest.raises(ValueError, match="at least 4 tokens, got 3"):
        pairwise_layer_cka([X[None, :3], Y[None, :3]], debiased=True)


def test_rbf_guards_name_the_problem():
    with pytest.raises(ValueError, match="threshold must be > 0, got 0"):
        rbf_cka(X, Y, threshold=0)
    with pytest.raises(ValueError, match="threshold must be > 0, got -1"):
        rbf_cka(X, Y, threshold=-1)
    # identical tokens: the median distance is 0 and the bandwidth undefined
    same = np.ones((6, 3))
    with pytest.raises(
        ValueError, match=r"^median squared distance between activations is 0 \(most tokens are identical\); the RBF"
    ):
        rbf_cka(same, X[:6])
    with pytest.raises(
        ValueError, match=r"the RBF bandwidth is undefined\. Use kernel='linear' or more varied prompts\.$"
    ):
        pairwise_layer_cka([same[None], X[None, :6]])


def test_shape_and_kernel_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"activations must be \[n_tokens, d\], got \(40,\) and \(40, 5\)"):
        linear_cka(X[:, 0], Y)
    with pytest.raises(ValueError, match=r"activations must be \[n_tokens, d\], got \(40, 6\) and \(40,\)"):
        linear_cka(X, Y[:, 0])
    with pytest.raises(ValueError, match="cover different tokens: 40 vs 39 rows; both must come from the same prompts"):
        rbf_cka(X, Y[:39])
    with pytest.raises(ValueError, match=r"kernel must be 'rbf' or 'linear', got 'cosine'"):
        layerwise_cka(X[None], Y[None], kernel="cosine")
    with pytest.raises(ValueError, match=r"equal layer and token counts, got \(1, 40, 6\) and \(1, 39, 5\)"):
        layerwise_cka(X[None], Y[None, :39])
    with pytest.raises(ValueError, match="equal layer and token counts"):
        layerwise_cka(X, Y)
    with pytest.raises(ValueError, match=r"need at least two refits for pairwise CKA, got seeds \[4\]"):
        pairwise_layer_cka({4: X[None]})
    with pytest.raises(
        ValueError, match=r"refit 2 activations have shape \(2, 9, 3\), refit 1 has \(2, 10, 3\); all must be"
    ):
        pairwise_layer_cka({1: np.zeros((2, 10, 3)), 2: np.zeros((2, 9, 3))})
    with pytest.raises(ValueError, match="over the same tokens"):
        pairwise_layer_cka({1: np.zeros((2, 10, 3)), 2: np.zeros((10, 3))})


def test_gram_errors_name_the_problem():
    from headstab.cka import cka_from_grams

    with pytest.raises(ValueError, match=r"Gram matrices differ in shape: \(3, 3\) vs \(4, 4\)"):
        cka_from_grams(np.eye(3), np.eye(4))
    with pytest.raises(ValueError, match=r"^Gram matrix must be symmetric\.$"):
        cka_from_grams(np.triu(np.ones((4, 4))), np.eye(4))


def test_token_activations_keep_empty_and_two_token_prompts():
    resid = np.arange(3 * 4 * 2, dtype=np.float64).reshape(3, 4, 2)
    tokens = token_activations(resid, np.array([2, 0, 1]))
    np.testing.assert_array_equal(tokens, np.concatenate([resid[0, :2], resid[2, :1]]))
    assert token_activations(np.zeros((0, 0, 2)), np.zeros(0, dtype=int)).shape == (0, 2)
    assert token_activations(np.zeros((0, 3, 2)), np.zeros(0, dtype=int)).shape == (0, 2)


def test_token_activation_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"resid must be \[prompt, pos, d_model\], got shape \(2, 3\)"):
        token_activations(np.zeros((2, 3)), np.array([1, 1]))
    with pytest.raises(ValueError, match=r"lengths must be \[prompt\] = \(2,\), got shape \(3,\)"):
        token_activations(np.zeros((2, 3, 4)), np.array([1, 1, 1]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 3\] \(the padded length\), got min -1 max 2"):
        token_activations(np.zeros((2, 3, 4)), np.array([-1, 2]))


def test_layer_summary_sorts_layers_and_averages_in_float64():
    table = _pair_table({1: 0.4, 0: 0.7}, n_refits=3)
    assert table["layer"].iloc[0] == 1  # layer 1 comes first in the table, but not in the summary
    float32_values = np.array([0.1, 0.2, 0.4], dtype=np.float32)
    table.loc[table.layer == 0, "cka"] = float32_values
    table["cka"] = table["cka"].astype(np.float32)
    summary = layer_cka_summary(table)
    assert summary["layer"].tolist() == [0, 1]
    # the float64 mean of the stored float32 values, not their float32 mean
    assert summary["cka_mean"].iloc[0] == pytest.approx(
        float32_values.astype(np.float64).mean(), rel=reduction_rtol(np.float64, 3)
    )
    assert summary["cka_mean"].iloc[0] != float(float32_values.mean())


def test_layer_summary_names_missing_columns():
    with pytest.raises(ValueError, match=r"CKA table lacks columns \['cka'\]; has \['seed_a', 'seed_b', 'layer'\]"):
        layer_cka_summary(_pair_table({0: 0.7}, n_refits=3).drop(columns="cka"))


def test_defaults_are_the_biased_estimator_and_threshold_one():
    from headstab.cka import cka_from_grams, gram_rbf

    np.testing.assert_allclose(gram_rbf(X), _rbf_by_loop(X, 1.0), rtol=CKA_RTOL)
    k, l = X @ X.T, Y @ Y.T
    assert cka_from_grams(k, l) == pytest.approx(_cka_direct(k, l, _hsic_biased), rel=CKA_RTOL)
    assert layerwise_cka(X[None], Y[None])[0] == pytest.approx(rbf_cka(X, Y, threshold=1.0), rel=CKA_RTOL)
