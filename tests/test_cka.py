import numpy as np
import pandas as pd
import pytest
from scipy.stats import ortho_group
from tolerances import reduction_atol, reduction_rtol

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
