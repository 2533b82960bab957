"""Training: the refits of one architecture (paper §3.1 recipe), stacked k per job, resumable and preemptible.

`model` is a plain PyTorch model of k refits stacked on a seed axis (bit-identical to k separate refits on
the CPU, TransformerBridge state-dict names, `initial_weights`' init bit-identical to build_model's); `stack`
builds and splits stacks from each refit's own state; `data` cuts the corpus shards into seeded windows;
`checkpoint` writes and verifies full states; `refit` is one refit's resume and outputs; `loop` steps the
stack (setup -> resume -> steps -> outputs). Each refit's directory holds
  final.pt                  the trained weights (TransformerLens state-dict names), written last
  train_log.csv             step, tokens, loss (mean since the previous row), lr, seconds
  meta.json                 spec, seed, token count, corpus and tokenizer identity, training options, environment
  state_{step:08d}.pt       the refit's full state (weights, Adam moments, step, data position, log rows) every
                            `checkpoint_every` steps and at the last step, with a `.sha256` sidecar (the newest
                            two are kept while training, the newest one after); a rerun resumes from the newest
                            one that verifies and ends bit-identical to an uninterrupted run (CPU). A state written
                            under anything else that determines the weights (see `resume_identity`) or beyond
                            the steps now requested is logged, deleted, and the refit restarts from step 0.

A refit stops with a DivergenceError (no final.pt) when a loss exceeds divergence_factor x ln(d_vocab) or
is not finite, and is dropped from its stack; the other refits go on. Full states with non-finite weights
are never written. transformer_lens is never imported here (its import costs seconds per job).
"""

from headstab.training.errors import DivergenceError, NonFiniteLossError, TrainingError
from headstab.training.loop import train_refit, train_refits
from headstab.training.options import RefitTarget, TrainingData, TrainingOptions

__all__ = [
    "DivergenceError",
    "NonFiniteLossError",
    "RefitTarget",
    "TrainingData",
    "TrainingError",
    "TrainingOptions",
    "train_refit",
    "train_refits",
]
