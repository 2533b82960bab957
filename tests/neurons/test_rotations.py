"""Random maps of a layer's neurons: Haar rotations are orthogonal and uniformly distributed (the QR sign fix),
Gurnee et al.'s maps have unit rows and are not orthogonal, and one seed gives the same maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.tolerances import reduction_atol

from headstab.neurons.rotations import draw_maps, gurnee_map, haar_rotation


def test_haar_rotations_are_orthogonal_to_rounding():
    d = 64
    rotations = haar_rotation((3, d), torch.Generator().manual_seed(0))  # [layer, d, d]
    identity = torch.eye(d, dtype=torch.float64)
    atol = reduction_atol(np.float64, d)  # a dot product of d unit-sized entries, well inside 1e-6
    for rotation in rotations:
        assert torch.allclose(rotation.T @ rotation, identity, rtol=0, atol=atol)
        assert torch.allclose(rotation @ rotation.T, identity, rtol=0, atol=atol)
    assert not torch.allclose(rotations[0], rotations[1])


def test_the_sign_fix_makes_the_rotations_uniform():
    """Under the Haar measure an entry is a coordinate of a uniform unit vector: mean 0 and mean square 1/d.
    The Q of a plain QR has Q[0, 0] near -1/2 on average in 3 dimensions (LAPACK's sign convention)."""
    draws = 20_000
    entry = haar_rotation((draws, 3), torch.Generator().manual_seed(1))[:, 0, 0]
    standard_error = float(entry.std()) / np.sqrt(draws)
    assert abs(float(entry.mean())) < 4 * standard_error
    assert abs(float((entry**2).mean()) - 1 / 3) < 4 * float((entry**2).std()) / np.sqrt(draws)


def test_gurnee_maps_have_unit_rows_and_are_not_rotations():
    maps = gurnee_map((2, 16), torch.Generator().manual_seed(2))
    atol = reduction_atol(np.float64, 16)
    assert torch.allclose(torch.linalg.vector_norm(maps, dim=-1), torch.ones(2, 16, dtype=torch.float64), atol=atol)
    gram = maps[0] @ maps[0].T
    assert float((gram - torch.eye(16, dtype=torch.float64)).abs().max()) > 0.1  # rows far from orthogonal


def test_one_seed_draws_the_same_maps_and_another_seed_others():
    first = list(draw_maps("haar", 3, 2, 4, seed=5))
    again = list(draw_maps("haar", 3, 2, 4, seed=5))
    other = list(draw_maps("haar", 3, 2, 4, seed=6))
    assert len(first) == 3 and first[0].shape == (2, 4, 4) and first[0].dtype == torch.float64
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0]) and not torch.equal(first[0], first[1])
    gurnee = next(draw_maps("gurnee", 1, 2, 4, seed=5))
    assert torch.allclose(torch.linalg.vector_norm(gurnee, dim=-1), torch.ones(2, 4, dtype=torch.float64))


def test_an_unknown_map_or_no_draw_is_refused():
    with pytest.raises(ValueError, match="neuron null map 'gaussian' is not one of haar, gurnee"):
        next(draw_maps("gaussian", 1, 1, 2, 0))
    with pytest.raises(ValueError, match="at least one draw; got n_draws=0"):
        next(draw_maps("haar", 0, 1, 2, 0))


def test_a_stack_of_maps_is_square_in_its_last_axis():
    """shape (2, 3, 5): 2 x 3 maps of 5 x 5, never sized by another axis of the stack."""
    rotations = haar_rotation((2, 3, 5), torch.Generator().manual_seed(3))
    maps = gurnee_map((2, 3, 5), torch.Generator().manual_seed(3))
    assert rotations.shape == (2, 3, 5, 5) and maps.shape == (2, 3, 5, 5)
    identity = torch.eye(5, dtype=torch.float64).expand(2, 3, 5, 5)
    atol = reduction_atol(np.float64, 5)
    assert torch.allclose(rotations.transpose(-2, -1) @ rotations, identity, rtol=0, atol=atol)
    norms = torch.linalg.vector_norm(maps, dim=-1)
    assert torch.allclose(norms, torch.ones(2, 3, 5, dtype=torch.float64), rtol=0, atol=atol)
    assert gurnee_map((2, 16), torch.Generator().manual_seed(2)).shape == (2, 16, 16)


def test_draw_maps_draws_the_kind_asked_for_from_its_seeded_generator():
    """Draw k of seed s is the k-th map drawn from one generator seeded with s, Haar or Gurnee as asked."""
    for kind, draw in (("haar", haar_rotation), ("gurnee", gurnee_map)):
        generator = torch.Generator().manual_seed(5)
        expected = [draw((2, 4), generator) for _ in range(3)]
        drawn = list(draw_maps(kind, 3, 2, 4, seed=5))
        assert all(torch.equal(x, y) for x, y in zip(drawn, expected, strict=True)), kind
    haar = next(draw_maps("haar", 1, 2, 4, seed=5))
    assert torch.allclose(haar[0] @ haar[0].T, torch.eye(4, dtype=torch.float64), rtol=0, atol=1e-12)
    gurnee = next(draw_maps("gurnee", 1, 2, 4, seed=5))
    assert float((gurnee[0] @ gurnee[0].T - torch.eye(4, dtype=torch.float64)).abs().max()) > 0.05


def test_gurnee_maps_come_from_the_generator_given():
    first = gurnee_map((2, 4), torch.Generator().manual_seed(7))
    torch.manual_seed(0)  # the global generator must not matter
    again = gurnee_map((2, 4), torch.Generator().manual_seed(7))
    other = gurnee_map((2, 4), torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_maps_are_drawn_on_the_generators_device_whatever_the_default_device():
    """With another default device (a session that set cuda, here meta) the maps stay on the generator's."""
    expected = [draw((2, 4), torch.Generator().manual_seed(1)) for draw in (haar_rotation, gurnee_map)]
    with torch.device("meta"):
        drawn = [draw((2, 4), torch.Generator().manual_seed(1)) for draw in (haar_rotation, gurnee_map)]
    for x, y in zip(drawn, expected, strict=True):
        assert x.device == torch.device("cpu") and torch.equal(x, y)


def test_draw_maps_makes_its_generator_on_the_device_asked_for(monkeypatch):
    """The generator, and so the maps, live on `device`: CPU maps of CUDA statistics would fail their product."""
    devices = []
    real = torch.Generator

    def recording(device="cpu"):
        devices.append(device)
        return real(device="cpu")

    monkeypatch.setattr(torch, "Generator", recording)
    next(draw_maps("haar", 1, 1, 2, 0, device=torch.device("cpu")))
    assert devices == [torch.device("cpu")]
