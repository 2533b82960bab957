"""Random linear maps of one layer's neurons, the baselines of neuron universality.

A map M [d_mlp, d_mlp] turns a refit's neurons b into the neurons M b ((M b)_j = sum_k M_jk b_k):
- `haar`: a rotation drawn uniformly (Haar measure on O(d)): the Q of the QR decomposition of a standard
  Gaussian matrix with its columns' signs fixed by the signs of R's diagonal (Mezzadri 2007; without the fix
  Q is not uniformly distributed). The rotated neurons are an orthonormal basis of the same space: the
  layer's covariance keeps its spectrum, only the neuron basis is lost.
- `gurnee`: Gurnee et al. 2024's baseline: one standard Gaussian matrix with rows scaled to norm 1, not
  orthogonal (each row is a uniformly random direction, as a rotation's rows are, but the rows are drawn
  independently, so the new neurons are no basis of orthogonal directions).
`draw_maps` yields, draw by draw, one map per layer from one seeded generator: the same seed gives the same maps.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

__all__ = ["NULL_MAPS", "draw_maps", "gurnee_map", "haar_rotation"]

NULL_MAPS = ("haar", "gurnee")


def haar_rotation(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Haar-distributed orthogonal matrices, float64 [..., d, d] for shape (..., d) (QR with the sign fix)."""
    gaussian = torch.randn((*shape, shape[-1]), generator=generator, dtype=torch.float64, device=generator.device)
    q, r = torch.linalg.qr(gaussian)
    signs = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    return q * signs[..., None, :]


def gurnee_map(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Standard Gaussian matrices with rows of norm 1, float64 [..., d, d] for shape (..., d)."""
    gaussian = torch.randn((*shape, shape[-1]), generator=generator, dtype=torch.float64, device=generator.device)
    return gaussian / torch.linalg.vector_norm(gaussian, dim=-1, keepdim=True)


def draw_maps(
    kind: str, n_draws: int, n_layers: int, d_mlp: int, seed: int, device: str | torch.device = "cpu"
) -> Iterator[torch.Tensor]:
    """Yield n_draws float64 [layer, d_mlp, d_mlp] maps of `kind` (NULL_MAPS), one generator seeded with `seed`."""
    if kind not in NULL_MAPS:
        raise ValueError(f"neuron null map {kind!r} is not one of {', '.join(NULL_MAPS)}")
    if n_draws < 1:
        raise ValueError(f"the neuron null needs at least one draw; got n_draws={n_draws}")
    generator = torch.Generator(device=device).manual_seed(seed)
    draw = haar_rotation if kind == "haar" else gurnee_map
    for _ in range(n_draws):
        yield draw((n_layers, d_mlp), generator)
