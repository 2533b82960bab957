"""Weight digests: one sha256 for equal values whatever their storage, a sketch distance within its error bound
of the exact relative L2, and the expected distance between independent draws."""

from __future__ import annotations

import numpy as np
import pytest

from headstab.refits.weight_digest import (
    SKETCH_BUCKETS,
    digest_from_dict,
    digest_to_dict,
    digest_weights,
    exact_relative_l2,
    identical_tensors,
    independent_draw_distance,
    relative_l2,
)


def random_state(seed: int, scale: float = 1.0, rows: int = 300) -> dict[str, np.ndarray]:
    """Weights as an initialisation draws them: two random matrices of different spread, a bias and a LayerNorm."""
    rng = np.random.default_rng(seed)
    return {
        "w_in": (rng.normal(0.0, 0.02, (rows, 200)) * scale).astype(np.float32),
        "w_out": (rng.normal(0.01, 0.05, (200, 100)) * scale).astype(np.float32),
        "bias": np.zeros(100, np.float32),
        "ln.weight": np.full(200, scale, np.float32),
    }


def test_equal_values_share_one_sha256_whatever_their_dtype_or_sign_of_zero():
    state = random_state(1)
    state["bias"][:3] = [0.0, 1.5, -2.25]
    as_half = {name: value.astype(np.float16) for name, value in state.items()}
    back = {name: value.astype(np.float32) for name, value in as_half.items()}
    assert digest_weights(as_half).sha256 == digest_weights(back).sha256  # float16 values read as float32
    negative_zero = {**state, "bias": np.where(state["bias"] == 0, np.float32(-0.0), state["bias"])}
    assert np.signbit(negative_zero["bias"]).sum() == 98 + 1  # the 98 zeros carry the sign bit now (and -2.25)
    assert digest_weights(negative_zero).sha256 == digest_weights(state).sha256
    one_ulp = {**state, "bias": state["bias"].copy()}
    one_ulp["bias"][1] = np.nextafter(np.float32(1.5), np.float32(2))
    moved = digest_weights(one_ulp)
    assert moved.sha256 != digest_weights(state).sha256
    assert identical_tensors(moved, digest_weights(state)) == ["ln.weight", "w_in", "w_out"]


def test_relative_l2_known_answers_and_scale_invariance():
    a, b = {"x": np.array([3.0, 0.0], np.float32)}, {"x": np.array([0.0, 4.0], np.float32)}
    # ||a - b|| = 5, sqrt((9 + 16) / 2) = 3.5355
    assert exact_relative_l2(a, b) == pytest.approx(5 / np.sqrt(12.5), rel=1e-12)
    assert exact_relative_l2(a, {"x": -a["x"]}) == pytest.approx(2.0, rel=1e-12)
    assert relative_l2(digest_weights(a), digest_weights(b)) == pytest.approx(5 / np.sqrt(12.5), rel=1e-12)
    small = [digest_weights(random_state(seed, scale=1e-4)) for seed in (1, 2)]
    large = [digest_weights(random_state(seed, scale=1e4)) for seed in (1, 2)]
    # relative: the same distance at any scale (an absolute L2 would differ by 1e8)
    assert relative_l2(*small) == pytest.approx(relative_l2(*large), rel=1e-5)
    assert relative_l2(small[0], small[0]) == 0.0


def test_the_sketch_estimates_the_exact_distance_within_its_error_bound():
    """The squared sketch distance is unbiased with relative s.d. <= sqrt(2 / buckets): with 1,024 buckets the
    distance is off by 2.2% s.d.; over 24 pairs the errors stay within 4 s.d. and average near zero."""
    buckets = 1024
    bound = np.sqrt(2 / buckets) / 2  # of the distance: half the relative s.d. of its square
    errors = []
    for seed in range(24):
        a, b = random_state(2 * seed, rows=60), random_state(2 * seed + 1, rows=60)
        exact = exact_relative_l2(a, b)
        errors.append(relative_l2(digest_weights(a, buckets), digest_weights(b, buckets)) / exact - 1)
    errors = np.array(errors)
    assert np.abs(errors).max() < 4 * bound
    assert abs(errors.mean()) < 4 * bound / np.sqrt(len(errors))
    assert errors.std() > bound / 10  # a real estimate: not the exact distance computed some other way
    a, b = random_state(1), random_state(2)  # the default sketch: 65,536 buckets for 80,300 values
    assert relative_l2(digest_weights(a), digest_weights(b)) == pytest.approx(
        exact_relative_l2(a, b), rel=4 * np.sqrt(2 / SKETCH_BUCKETS) / 2
    )


def test_the_independent_draw_distance_is_the_distance_between_two_initialisations():
    distances = [exact_relative_l2(random_state(seed), random_state(seed + 100)) for seed in range(5)]
    predicted = independent_draw_distance(digest_weights(random_state(0)))
    # the constant LayerNorm and bias add nothing to it, but count in the norm: far below sqrt(2) here
    assert predicted == pytest.approx(np.mean(distances), rel=0.01)
    assert predicted == pytest.approx(0.732, abs=0.005)


def test_a_digest_round_trips_through_its_dict_and_refuses_another_layout():
    digest = digest_weights(random_state(3))
    again = digest_from_dict(digest_to_dict(digest))
    assert again.sha256 == digest.sha256 and again.tensors == digest.tensors
    np.testing.assert_array_equal(again.sketch, digest.sketch)
    other = digest_weights({**random_state(3), "extra": np.ones(4, np.float32)})
    with pytest.raises(ValueError, match=r"different weights layouts .*\('extra', \(4,\)\)"):
        relative_l2(digest, other)
    ints = digest_weights({**random_state(3), "steps": np.arange(4)})  # integer buffers are not weights
    assert ints.sha256 == digest.sha256


def test_one_initialisation_stored_at_lower_precision_stays_far_below_same_init_max():
    import torch

    from headstab.plan.family_audit import SAME_INIT_MAX

    state = random_state(4)
    half = {name: value.astype(np.float16).astype(np.float32) for name, value in state.items()}
    brain = {name: torch.from_numpy(value).bfloat16().float().numpy() for name, value in state.items()}
    assert exact_relative_l2(state, half) < 3e-4 and exact_relative_l2(state, brain) < 2e-3
    assert max(exact_relative_l2(state, half), exact_relative_l2(state, brain)) < SAME_INIT_MAX / 50
