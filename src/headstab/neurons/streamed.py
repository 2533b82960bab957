"""Streamed statistics of two refits' MLP neurons on one token stream: the means, each refit's per-layer
covariance and the anchor-by-other cross-covariance, accumulated in float64 chunk by chunk, never storing
an activation.

Chunks are `blocks.{layer}.mlp.hook_post` activations [token, layer, d_mlp] (float16 or float32, the same
tokens in the same order for both refits). Each chunk is centred on its own mean and merged into the running
statistics by Chan et al.'s pairwise update, C = C_1 + C_2 + (n_1 n_2 / n) (m_1 - m_2)(m'_1 - m'_2)^T, so
no sum of raw squares ever cancels against a squared mean, and merging two accumulators of disjoint token
shards equals one pass over both (up to float64 rounding).

Scopes (as for heads): `same_layer` keeps the cross-covariance of each layer with the same layer,
[layer, d_mlp, d_mlp]; `cross_layer` keeps every neuron with every neuron, [layer * d_mlp, layer * d_mlp]
(row l * d_mlp + i is neuron i of layer l). Each refit's own covariance is per layer in both scopes: the
rotation null rotates within a layer.

Memory of one accumulator in float64 (8 B a number), d = d_mlp, L = layer:
- same_layer: 3 L d^2 * 8 B (the cross-covariance and both refits' covariances); GPT-2 small (L = 12,
  d = 3072): 3 * 0.91 GB = 2.7 GB;
- cross_layer: ((L d)^2 + 2 L d^2) * 8 B; GPT-2 small: 10.9 GB + 1.8 GB = 12.7 GB.
`accumulator_bytes` computes it for a plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

__all__ = ["ACCUMULATOR_DTYPE", "NEURON_SCOPES", "PairStatistics", "accumulator_bytes"]

NEURON_SCOPES = ("same_layer", "cross_layer")
ACCUMULATOR_DTYPE = torch.float64  # float32 sums of 1e5 tokens already err by ~1e-7 of the covariance
_FLOAT64_BYTES = 8


def accumulator_bytes(n_layers: int, d_mlp: int, scope: str) -> int:
    """Bytes of one PairStatistics' float64 tensors (the means are negligible and left out)."""
    _check_scope(scope)
    per_layer = n_layers * d_mlp * d_mlp
    cross = (n_layers * d_mlp) ** 2 if scope == "cross_layer" else per_layer
    return (cross + 2 * per_layer) * _FLOAT64_BYTES


def _check_scope(scope: str) -> None:
    if scope not in NEURON_SCOPES:
        raise ValueError(f"neuron scope {scope!r} is not one of {', '.join(NEURON_SCOPES)}")


@dataclass
class PairStatistics:
    """Running float64 statistics of an anchor refit's and another refit's neurons on the same tokens.

    n_tokens: tokens seen; mean_a, mean_b: [layer, d_mlp]; comoment_a, comoment_b: [layer, d_mlp, d_mlp], the
    sum over tokens of each refit's centred outer products (covariance times n_tokens); cross: the anchor's by
    the other's centred products, [layer, d_mlp, d_mlp] (same_layer) or [layer * d_mlp, layer * d_mlp]
    (cross_layer), rows the anchor's neurons.
    """

    anchor: str
    other: str
    scope: str
    n_tokens: int
    mean_a: torch.Tensor
    mean_b: torch.Tensor
    comoment_a: torch.Tensor
    comoment_b: torch.Tensor
    cross: torch.Tensor

    @classmethod
    def empty(
        cls, anchor: str, other: str, n_layers: int, d_mlp: int, scope: str, device: str | torch.device = "cpu"
    ) -> PairStatistics:
        """Statistics of no token yet (memory: `accumulator_bytes(n_layers, d_mlp, scope)`)."""
        _check_scope(scope)
        zeros = lambda *shape: torch.zeros(shape, dtype=ACCUMULATOR_DTYPE, device=device)  # noqa: E731
        flat = n_layers * d_mlp
        cross = zeros(flat, flat) if scope == "cross_layer" else zeros(n_layers, d_mlp, d_mlp)
        means = (zeros(n_layers, d_mlp), zeros(n_layers, d_mlp))
        return cls(anchor, other, scope, 0, *means, zeros(n_layers, d_mlp, d_mlp), zeros(n_layers, d_mlp, d_mlp), cross)

    @property
    def n_layers(self) -> int:
        return int(self.mean_a.shape[0])

    @property
    def d_mlp(self) -> int:
        return int(self.mean_a.shape[1])

    def update(self, anchor_chunk: Any, other_chunk: Any) -> None:
        """Add one chunk of both refits' activations, each [token, layer, d_mlp] (numpy or torch, float16 or
        float32; upcast to float64 here), the same tokens in the same order."""
        a = self._chunk(anchor_chunk, self.anchor)
        b = self._chunk(other_chunk, self.other)
        if a.shape[0] != b.shape[0]:
            raise ValueError(
                f"neuron statistics of refit {self.anchor!r} against {self.other!r}: a chunk has {a.shape[0]} tokens "
                f"of refit {self.anchor!r} but {b.shape[0]} of refit {self.other!r}; feed both refits the same token "
                "batches in the same order"
            )
        if a.shape[0] == 0:
            return
        chunk_a, chunk_b = a.mean(dim=0), b.mean(dim=0)
        a, b = a - chunk_a, b - chunk_b
        self._absorb(a.shape[0], chunk_a, chunk_b, _layer_products(a, a), _layer_products(b, b), self._cross(a, b))

    def _chunk(self, chunk: Any, refit: str) -> torch.Tensor:
        values = torch.as_tensor(chunk, device=self.mean_a.device)  # checked before the upcast: half the bytes
        expected = (self.n_layers, self.d_mlp)
        if values.ndim != 3 or tuple(values.shape[1:]) != expected:
            raise ValueError(
                f"neuron statistics of refit {self.anchor!r} against {self.other!r}: a chunk of refit {refit!r} has "
                f"shape {tuple(values.shape)}, not [token, layer, d_mlp] = [token, {expected[0]}, {expected[1]}]; "
                "capture blocks.{layer}.mlp.hook_post of every layer of a model of this architecture"
            )
        finite = torch.isfinite(values).all(dim=(0, 2))
        if not bool(finite.all()):
            layer = int(torch.nonzero(~finite)[0, 0])
            raise ValueError(
                f"neuron statistics: refit {refit!r} has a non-finite activation in layer {layer} "
                f"(blocks.{layer}.mlp.hook_post), beyond float16's range if captured in float16; capture in float32"
            )
        return values.to(ACCUMULATOR_DTYPE)

    def _cross(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.scope == "cross_layer":
            return a.reshape(a.shape[0], -1).T @ b.reshape(b.shape[0], -1)
        return _layer_products(a, b)

    def _absorb(self, n: int, mean_a, mean_b, comoment_a, comoment_b, cross) -> None:
        """Merge statistics of n tokens (centred comoments) into these, in place (Chan et al.'s update)."""
        total = self.n_tokens + n
        weight = self.n_tokens * n / total
        delta_a, delta_b = mean_a - self.mean_a, mean_b - self.mean_b
        self.comoment_a += comoment_a + weight * delta_a[:, :, None] * delta_a[:, None, :]
        self.comoment_b += comoment_b + weight * delta_b[:, :, None] * delta_b[:, None, :]
        if self.scope == "cross_layer":
            self.cross += cross + weight * torch.outer(delta_a.reshape(-1), delta_b.reshape(-1))
        else:
            self.cross += cross + weight * delta_a[:, :, None] * delta_b[:, None, :]
        self.mean_a += delta_a * (n / total)
        self.mean_b += delta_b * (n / total)
        self.n_tokens = total

    def merged(self, other: PairStatistics) -> PairStatistics:
        """These statistics and `other`'s (the same refits on a disjoint token shard) as one pass over both."""
        for name in ("anchor", "other", "scope"):
            if getattr(self, name) != getattr(other, name):
                raise ValueError(
                    f"cannot merge neuron statistics of different {name}s: {getattr(self, name)!r} and "
                    f"{getattr(other, name)!r}; merge only shards of the same refit pair and scope"
                )
        if self.cross.shape != other.cross.shape:
            raise ValueError(
                f"cannot merge neuron statistics of refit {self.anchor!r} against {self.other!r}: layer x d_mlp "
                f"{self.n_layers} x {self.d_mlp} and {other.n_layers} x {other.d_mlp}; merge shards of one architecture"
            )
        out = replace(self, **{name: getattr(self, name).clone() for name in _TENSORS})
        if other.n_tokens:
            if out.n_tokens == 0:
                return replace(other, **{name: getattr(other, name).clone() for name in _TENSORS})
            out._absorb(other.n_tokens, *(getattr(other, name) for name in _TENSORS))
        return out

    def swapped(self) -> PairStatistics:
        """The same statistics with the other refit as the anchor (the cross-covariance transposed)."""
        cross = self.cross.T if self.scope == "cross_layer" else self.cross.transpose(1, 2)
        roles = (self.other, self.anchor, self.scope, self.n_tokens)
        return PairStatistics(*roles, self.mean_b, self.mean_a, self.comoment_b, self.comoment_a, cross)

    def check_tokens(self) -> None:
        """Fail unless at least 2 tokens were streamed (a covariance needs 2), naming the refits."""
        if self.n_tokens < 2:
            raise ValueError(
                f"neuron statistics of refit {self.anchor!r} against {self.other!r} hold {self.n_tokens} token(s); "
                "a covariance needs at least 2: stream more tokens"
            )

    def covariances(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Sigma_A [layer, d_mlp, d_mlp], Sigma_B [layer, d_mlp, d_mlp], C_AB [as `cross`]): population
        covariances (divided by n_tokens; Pearson's r does not depend on the divisor)."""
        self.check_tokens()
        n = float(self.n_tokens)
        return self.comoment_a / n, self.comoment_b / n, self.cross / n


_TENSORS = ("mean_a", "mean_b", "comoment_a", "comoment_b", "cross")


def _layer_products(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[token, layer, d] x [token, layer, d'] -> [layer, d, d']: the sum over tokens of a_i b_j, layer by layer."""
    return torch.bmm(a.permute(1, 2, 0), b.permute(1, 0, 2))
