"""The training loop as it was before the plain model: TransformerLens's TransformerBridge, one refit, stepped
by torch's Adam/AdamW on the refit's own window order. The reference the plain training model is compared with
(tests/training/test_against_bridge.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from headstab.plan.spec import ArchitectureSpec


def bridge_training_run(
    spec: ArchitectureSpec, seed: int, shard_paths: Sequence[Path], steps: int, ulp_nudge: float = 0.0
) -> dict[str, torch.Tensor]:
    """The state dict of refit `seed` after `steps` steps of the bridge-based loop (CPU, float32).

    ulp_nudge: +inf or -inf: start from the initial weights moved one ulp up or down (torch.nextafter towards it),
    every one of them; 0: from the initial weights themselves.
    """
    from headstab.refits.models import build_model
    from headstab.training.data import TokenWindows, window_order

    model = build_model(spec, seed)
    model.train()
    if ulp_nudge:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.copy_(torch.nextafter(parameter, torch.tensor(ulp_nudge)))
    if spec.optimizer == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=spec.lr)
    data = TokenWindows.open(shard_paths, spec.seq_len)
    order = window_order(data.n_windows, seed, steps * spec.batch_size)
    for step in range(steps):
        tokens = data.batch(order[step * spec.batch_size : (step + 1) * spec.batch_size])
        loss = model(tokens, return_type="loss")  # the old loop's train_step: TransformerLens's own loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
