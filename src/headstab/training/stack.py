"""Stacks of refits: the training model and optimiser of k refits, built from each refit's own state and split back.

A refit's state is its weights (a TransformerBridge state dict) and, after step 0, its Adam moments: the
training model's parameter names mapped to that refit's slice of `exp_avg` and `exp_avg_sq` over the real
vocabulary (so a state does not depend on the model's padding), and the step count. Adam updates every number on its own, so moments stacked from k refits at the same step and
stepped together equal each refit's stepped alone, bit for bit on the CPU (tests/training/test_loop.py);
a stack can therefore be re-formed whenever its membership changes (a refit joins at its resume step, a
diverged one is dropped) without changing any refit's numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from headstab.plan.spec import ArchitectureSpec
from headstab.training.errors import TrainingError
from headstab.training.model import StackedTransformer
from headstab.training.options import TrainingOptions

MOMENTS = ("exp_avg", "exp_avg_sq")


@dataclass
class RefitState:
    """One refit's weights (bridge names, CPU) and Adam state {"step", "exp_avg": {name: t}, ...}, None at step 0."""

    weights: dict[str, torch.Tensor]
    moments: dict[str, Any] | None = None


def make_optimizer(
    spec: ArchitectureSpec, parameters: Iterable[torch.nn.Parameter], device: torch.device
) -> torch.optim.Optimizer:
    """Adam without weight decay, or AdamW with decoupled decay on all parameters (biases and LayerNorms too, as the
    paper); torch's fused kernel on CUDA (one launch per step for all parameters)."""
    fused = {"fused": True} if device.type == "cuda" else {}
    if spec.optimizer == "adam":
        if spec.weight_decay:
            raise TrainingError(
                f"architecture '{spec.name}' sets optimizer adam with weight_decay {spec.weight_decay}; the paper's "
                f"decayed refits use `optimizer: adamw` (set architectures.{spec.name}.optimizer)"
            )
        return torch.optim.Adam(parameters, lr=spec.lr, **fused)
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(parameters, lr=spec.lr, weight_decay=spec.weight_decay, **fused)
    raise TrainingError(f"architecture '{spec.name}': unknown optimizer '{spec.optimizer}' (adam or adamw)")


def assemble(
    spec: ArchitectureSpec, states: Sequence[RefitState], options: TrainingOptions, device: torch.device
) -> tuple[StackedTransformer, torch.optim.Optimizer]:
    """The training model and optimiser of the refits `states`, in order; all at step 0 or all at one step."""
    model = StackedTransformer(
        spec,
        len(states),
        attention=options.attention,
        precision=options.precision,
        vocab_multiple=options.vocab_multiple,
    )
    for i, state in enumerate(states):
        model.load_seed_state_dict(i, state.weights)
    model.to(device).train()
    optimizer = make_optimizer(spec, model.parameters(), device)
    steps = {None if state.moments is None else state.moments["step"] for state in states}
    if len(steps) != 1:
        raise ValueError(f"a stack's refits must share their optimiser step; got steps {sorted(map(str, steps))}")
    if steps != {None}:
        _load_moments(model, optimizer, [state.moments for state in states])
    return model, optimizer


def _load_moments(model: StackedTransformer, optimizer: torch.optim.Optimizer, moments: Sequence[Mapping]) -> None:
    """Stack every refit's Adam moments into `optimizer` (whose parameters are `model`'s, in order)."""
    state = {}
    for index, (name, _) in enumerate(model.named_parameters()):
        if name not in moments[0]["exp_avg"]:
            continue  # a parameter Adam never stepped (no gradient yet)
        # A refit's moments cover the real vocabulary; the padding's are zero (its weights never get a gradient).
        entry = {
            key: model.padded_vocabulary(name, torch.stack([refit[key][name] for refit in moments])) for key in MOMENTS
        }
        state[index] = {"step": torch.tensor(float(moments[0]["step"])), **entry}
    # load_state_dict moves the moments to the parameters' device and the step where the kernel wants it.
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})


def split(model: StackedTransformer, optimizer: torch.optim.Optimizer, indices: Iterable[int]) -> list[RefitState]:
    """The states of the refits at `indices` of the stack, copied to the CPU."""
    named = list(model.named_parameters())
    step = None
    for _, parameter in named:
        if parameter in optimizer.state:
            step = int(optimizer.state[parameter]["step"].item())  # one host sync, at a re-form or checkpoint
            break
    states = []
    for i in indices:
        weights = {name: t.cpu() for name, t in model.seed_state_dict(i).items()}
        moments = None
        if step is not None:
            moments = {"step": step}
            for key in MOMENTS:
                moments[key] = {
                    name: model.real_vocabulary(name, optimizer.state[p][key][i])
                    .detach()
                    .cpu()
                    .clone(memory_format=torch.contiguous_format)
                    for name, p in named
                    if p in optimizer.state
                }
        states.append(RefitState(weights, moments))
    return states


def finite_refits(model: StackedTransformer) -> list[bool]:
    """Whether every weight of each refit of the stack is finite, [seed] (one host sync)."""
    per_parameter = [torch.isfinite(p.detach()).flatten(1).all(dim=1) for p in model.parameters()]
    return torch.stack(per_parameter).all(dim=0).tolist()
