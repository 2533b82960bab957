"""The smallest change to a refit's initial weights: every weight moved by one unit in the last place (ulp).

A seed grid's "shares both" arm (docs/beyond_the_paper.md) trains twins of a grid cell with the same init and
data-order seeds from weights that differ in the last bit alone, so the pairs measure how far training carries
a one-bit difference: the floor under the init x data interaction. Every nonzero element of every floating
parameter moves to np.nextafter(x, +inf) (float32: a relative change of 2^-24 to 2^-23). Buffers (the
unembedding's bias buffer, masks) are not weights and stay. Exact zeros (biases) stay: their next float up is a
subnormal, which GPUs flush to zero, so it would be a perturbation on one device and none on another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

__all__ = ["ULP", "nudge_one_ulp", "nudge_weights_one_ulp"]

ULP = "one_ulp"  # the name meta.json and the resume identity give the perturbation


def nudge_one_ulp(model: torch.nn.Module) -> int:
    """Move every nonzero element of every floating parameter of `model` one ulp toward +inf, in place.

    A parameter tied under several names is moved once. Returns the number of elements moved.
    """
    return _nudge(model.parameters())  # each tied parameter once, buffers not at all


def nudge_weights_one_ulp(weights: Mapping[str, torch.Tensor]) -> int:
    """`nudge_one_ulp` of a state dict of initial weights (training.initial_weights), in place.

    Its one buffer, the unembedding's bias, is zero and stays; a tensor under several names moves once.
    Returns the number of elements moved.
    """
    unique = {id(tensor): tensor for tensor in weights.values()}
    return _nudge(unique.values())


def _nudge(tensors: Iterable[torch.Tensor]) -> int:
    moved = 0
    with torch.no_grad():
        for tensor in tensors:
            if not tensor.is_floating_point():
                continue
            nonzero = tensor != 0
            up = torch.nextafter(tensor, torch.full_like(tensor, torch.inf))
            tensor.copy_(torch.where(nonzero, up, tensor))
            moved += int(nonzero.sum())
    return moved
