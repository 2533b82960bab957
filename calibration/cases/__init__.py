"""Every calibration case: each module of this package holds one family's CASES (and POWER, optional);
they are collected here in module order, so a new family is a new module."""

from __future__ import annotations

import importlib
import pkgutil

from calibration.harness import Case, PowerCase

__all__ = ["CASES", "POWER"]


def _collect() -> tuple[list[Case], list[PowerCase]]:
    cases, power = [], []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        cases += list(getattr(module, "CASES", ()))
        power += list(getattr(module, "POWER", ()))
    return cases, power


CASES, POWER = _collect()
