"""Training: one refit (architecture, seed) of the paper's §3.1 recipe, resumable and preemptible.

`data` cuts the corpus shards into seeded windows, `checkpoint` writes and verifies full states,
`loop` trains (setup -> resume -> steps -> outputs). `model` is a plain PyTorch model of k refits stacked
on a seed axis, with the bridge's state-dict names and `initial_weights`' bit-identical init (the loop
still trains the TransformerBridge of headstab.refits.models). The checkpoint directory holds
  final.pt                  the trained weights (TransformerLens state-dict names), written last
  train_log.csv             step, tokens, loss (mean since the previous row), lr, seconds
  meta.json                 spec, seed, token count, corpus and tokenizer identity, environment
  state_{step:08d}.pt       full state (model, optimiser, RNG, step, data position, log rows) every
                            `checkpoint_every` steps, with a `.sha256` sidecar (the newest two are kept while
                            training, the newest one after); a rerun resumes from the newest one that
                            verifies and ends bit-identical to an uninterrupted run (CPU). A state written
                            under anything else that determines the weights (see `resume_identity`) or beyond
                            the steps now requested is logged, deleted, and training restarts from step 0.

Training stops with a DivergenceError (no final.pt) when a loss exceeds divergence_factor x ln(d_vocab)
or is not finite; full states with non-finite weights are never written.
"""

from headstab.training.errors import DivergenceError, NonFiniteLossError, TrainingError
from headstab.training.loop import train_refit

__all__ = ["DivergenceError", "NonFiniteLossError", "TrainingError", "train_refit"]
