"""Running Snakemake from the tests: one environment, one command line, one reading of the job counts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def snakemake_env() -> dict[str, str]:
    """This environment offline for the hub, without a surrounding Slurm job's or GPU partition's
    variables, and with this interpreter's bin directory first on PATH (for `--sdm` and scripts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "HEADSTAB_GPU_"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    return env


def run_snakemake(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m snakemake <args>` from the repository root, in `snakemake_env()`, output captured."""
    command = [sys.executable, "-m", "snakemake", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=snakemake_env(), timeout=timeout)


def job_counts(output: str) -> dict[str, int]:
    """{rule: jobs} from the "Job stats" table Snakemake prints."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*([A-Za-z_]\w*)\s+(\d+)\s*$", output, re.M)}


# The tables of every rule that runs a refit (validation and ablation perplexity, layer drop/swap, head-type scores)
# or reads its weights, caches or similarity, up to the stability tables: what a refit from elsewhere (a published
# mirror, a hub family) must get through. The rules that only read these tables (figures, head types, layer
# robustness, weight-norm correlation) run the same code whatever the weights' source; the tiny DAG
# (tests/workflow/test_integration.py) runs them.
MODEL_ANALYSIS_TABLES = (
    "head_stability",
    "weight_norms",
    "validation_perplexity",
    "residual_cka",
    "ablation",
    "prompt_length",
    "activation_norms",
    "effective_rank",
    "layer_drop_swap",
    "head_type_scores",
)
