"""How an activation cache is written (config section `cache`, and each rule's own choices), checked when built."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CacheOptions"]


@dataclass(frozen=True)
class CacheOptions:
    """How a cache is written (config section `cache`, and the rule's own choices).

    batch_size, dtype: prompts per forward pass; float32 or float16 storage (computation stays float32).
    compression_level / pattern_compression_level: gzip level 1-9 behind shuffle for the per-token
    datasets (`hook_z`, the residual hooks) / `hook_pattern`; None (the defaults): uncompressed, the
    fastest to write and read (docs/caches.md "Layout and compression", "Disk").
    extra_resid_hooks: residual hooks to store besides `hook_resid_mid` (`hook_resid_post` for
    attention-only models), e.g. ("hook_resid_pre",); hooks already stored add nothing.
    checksum: fletcher32 on every dataset (the format's contract); False only to measure its cost.
    patterns_only: store `hook_pattern` alone (no hook_z, no residual hooks; file attribute
    `patterns_only`), e.g. the snapshots along training, which only the prompt-group similarity reads.
    activation_sets: the prompt sets whose hook_z and residual hooks are stored (None: every set); the
    others store hook_pattern alone (group attribute `activations`, file attribute `activation_sets`),
    since only the analyses of one set read them (config key cache.activation_sets).
    residual_only: those sets store the residual hooks but no hook_z (`activations` "residual", file attribute
    `residual_only`), e.g. the step-0 snapshots, which residual CKA reads.
    show_progress: a tqdm bar per cache.
    """

    batch_size: int = 20
    dtype: str = "float32"
    compression_level: int | None = None
    pattern_compression_level: int | None = None
    extra_resid_hooks: Sequence[str] = ()
    checksum: bool = True
    patterns_only: bool = False
    activation_sets: Sequence[str] | None = None
    residual_only: bool = False
    show_progress: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "float16"):
            raise ValueError(
                f"cache dtype {self.dtype!r} is not supported; use float32 or float16 (config key cache.dtype)"
            )
        if self.batch_size < 1:
            raise ValueError(f"cache batch_size must be >= 1, got {self.batch_size} (config key cache.batch_size)")
        _check_level(self.compression_level, "compression_level")
        _check_level(self.pattern_compression_level, "pattern_compression_level")
        if self.residual_only and self.patterns_only:
            raise ValueError(
                "a cache is patterns_only or residual_only, not both (residual_only adds the residual hooks)"
            )
        if isinstance(self.activation_sets, str):
            raise TypeError(
                f"activation_sets must be a sequence of prompt set names, got the string {self.activation_sets!r}"
            )


def _check_level(level: int | None, key: str) -> None:
    if level is not None and not 1 <= level <= 9:
        raise ValueError(f"{key} must be 1-9 or None (uncompressed), got {level} (config key cache.{key})")
