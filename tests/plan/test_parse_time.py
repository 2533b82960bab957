"""headstab.plan is what Snakemake imports while it plans: it must not pull in torch or h5py (seconds each)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "h5py", "transformer_lens", "transformers", "pandas", "scipy", "matplotlib")


def test_planning_imports_no_torch_h5py_or_other_heavy_package():
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import headstab.plan as plan\n"
        "for module in pkgutil.iter_modules(plan.__path__):\n"
        "    importlib.import_module(f'headstab.plan.{module.name}')\n"
        "import headstab.check, headstab.prompts.loading, headstab.sections\n"
        f"print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []


def test_the_check_sees_a_heavy_import():
    result = subprocess.run(
        [sys.executable, "-c", "import sys, h5py; print('h5py' in sys.modules)"], capture_output=True, text=True
    )
    assert result.stdout.strip() == "True"
