"""The smallest change to a refit's initial weights: every weight moved by one unit in the last place (ulp).

A seed grid's "shares both" arm (docs/beyond_the_paper.md) trains twins of a grid cell with the same init and
data-order seeds from weights that differ in the last bit alone, so the pairs measure how far training carries
a one-bit difference: the floor under the init x data interaction. Every nonzero element of every floating
parameter moves to np.nextafter(x, +inf) (float32: a relative change of 2^-24 to 2^-23). Buffers (the
unembedding's bias buffer, masks) are not weights and stay. Exact zeros (biases) stay: their next float up is a
subnormal, which GPUs flush to zero, so it would be a perturbation on one device and none on another.
"""

from __future__ import annotations

import torch

__all__ = ["ULP", "nudge_one_ulp"]

ULP = "one_ulp"  # the name meta.json and the resume identity give the perturbation


def nudge_one_ulp(model: torch.nn.Module) -> int:
    """Move every nonzero element of every floating parameter of `model` one ulp toward +inf, in place.

    A parameter tied under several names is moved once. Returns the number of elements moved.
    """
    moved = 0
    with torch.no_grad():
        for parameter in model.parameters():  # each tied parameter once
            if not parameter.is_floating_point():
                continue
            nonzero = parameter != 0
            up = torch.nextafter(parameter, torch.full_like(parameter, torch.inf))
            parameter.copy_(torch.where(nonzero, up, parameter))
            moved += int(nonzero.sum())
    return moved
