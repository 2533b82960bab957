"""Why a refit cannot start or continue."""


class TrainingError(RuntimeError):
    """Training cannot start or continue; the message names the file or config key and the fix."""


class DivergenceError(TrainingError):
    """A loss exceeded divergence_factor x ln(d_vocab); no final.pt, the last full state before it is kept."""


class NonFiniteLossError(DivergenceError):
    """The loss or the weights became NaN or infinite; no final.pt, the last finite full state is kept."""
