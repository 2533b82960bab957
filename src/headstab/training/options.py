"""What a training job is given: its data, and how it trains (plain data, printed at start, saved in meta.json).

`precision` changes the weights a refit ends with (bfloat16 rounds every matmul's inputs), so it is in the
train rule's params and in every full state's identity: changing it retrains. The others only change how
fast the same numbers are computed (up to float rounding, for `attention` and `compile`): the refits
trained together (`seeds_per_job` in the config), the attention kernel, torch.compile, the device, the padding
of the vocabulary inside the training model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headstab.plan.spec import ConfigError
from headstab.training.model import ATTENTION_KERNELS, PRECISIONS, VOCAB_MULTIPLE


@dataclass(frozen=True)
class TrainingData:
    """The token shards every refit of a job trains on; the corpus meta.json (its sha256 is part of every refit's
    identity) and the tokenizer directory (its size is checked against d_vocab), when known."""

    shard_paths: tuple[Path, ...]
    corpus_meta_path: Path | None = None
    tokenizer_dir: Path | None = None

    @classmethod
    def of(
        cls,
        shard_paths: Sequence[str | Path],
        corpus_meta_path: str | Path | None = None,
        tokenizer_dir: str | Path | None = None,
    ) -> TrainingData:
        return cls(
            tuple(Path(p) for p in shard_paths),
            corpus_meta_path and Path(corpus_meta_path),
            tokenizer_dir and Path(tokenizer_dir),
        )


@dataclass(frozen=True)
class TrainingOptions:
    """How a job trains its refits (see the module docstring for which options change the weights).

    precision: fp32 | tf32 (TF32 matmuls on CUDA, fp32 elsewhere) | bf16 (autocast; float32 master weights,
    optimiser state and loss). attention: materialised | sdpa. compile: torch.compile the loss (forward and
    backward). device: auto | cpu | cuda. threads: torch CPU threads (None: torch's default). vocab_multiple:
    the training model pads its vocabulary to a multiple of this (1: no padding; checkpoints never see it).
    keep_checkpoints: full states kept per refit while training. on_step_end(step): called after each step's
    checkpoint (tests raise in it to simulate a kill).
    """

    precision: str = "fp32"
    attention: str = "materialised"
    compile: bool = False
    device: str = "auto"
    threads: int | None = None
    keep_checkpoints: int = 2
    progress: bool = True
    vocab_multiple: int = VOCAB_MULTIPLE
    on_step_end: Callable[[int], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for key, value, allowed in (
            ("precision", self.precision, PRECISIONS),
            ("attention", self.attention, ATTENTION_KERNELS),
        ):
            if value not in allowed:
                raise ConfigError(f"config key 'training.{key}': {value!r} is unknown; use one of {', '.join(allowed)}")

    def record(self) -> dict[str, Any]:
        """The options as meta.json records them."""
        return {
            "precision": self.precision,
            "attention": self.attention,
            "compile": self.compile,
            "device": self.device,
            "threads": self.threads,
            "vocab_multiple": self.vocab_multiple,
        }


@dataclass(frozen=True)
class RefitTarget:
    """One refit of a job: its name as the spec lists it (7, "1-2" for a seed grid's init-data pair, "1-2-ulp" for
    that cell's one-ulp twin) and the directory of its full states, snapshots and outputs."""

    name: int | str
    out_dir: Path
