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


# The tables of every rule that runs a refit (validation and ablation perplexity, layer drop/swap, head-type scores,
# the MLP neurons' streamed statistics) or reads its weights, caches or similarity, up to the stability tables: what
# a refit from elsewhere (a published mirror, a hub family) must get through. The rules that only read these tables
# (figures, head types, layer robustness, weight-norm correlation) run the same code whatever the weights' source;
# the tiny DAG (tests/workflow/test_integration.py) runs them.
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
    "neuron_universality",
    "neuron_scores",
)


def copy_run_with_metadata(results: Path, copy: Path, renamed: dict[str, str] | None = None) -> Path:
    """A copy of the finished run `results` at `copy` (mtimes kept) with Snakemake's records of it: each
    record in .snakemake/metadata of an output under `results` written again for the same output under
    `copy`, every path in it renamed (`results` to `copy`, and each path that is a key of `renamed` to its
    value, e.g. a prompt file to its copy). Snakemake then compares params, input sets and code with what made the
    outputs, as it does in `results` itself (a plain copy has dates only)."""
    import json
    import shutil
    from base64 import urlsafe_b64decode, urlsafe_b64encode

    shutil.copytree(results, copy, copy_function=shutil.copy2)
    metadata = REPO / ".snakemake/metadata"
    max_len = os.pathconf(metadata, "PC_NAME_MAX")
    for directory, _, names in list(os.walk(metadata)):  # the records before any is written for the copy
        for name in names:
            record = Path(directory, name)
            # urlsafe base64 of the output's path, split into '@'-prefixed directories when too long
            encoded = "".join(part.lstrip("@") for part in record.relative_to(metadata).parts)
            path = urlsafe_b64decode(encoded).decode()
            if not path.startswith(f"{results}/"):
                continue
            path, text = path.replace(str(results), str(copy)), record.read_text().replace(str(results), str(copy))
            for old, new in (renamed or {}).items():  # a path stands in quotes: JSON's, or Python's in params
                for quote in ("'", '"'):
                    text = text.replace(f"{quote}{old}", f"{quote}{new}")
            fields = json.loads(text)
            if isinstance(fields.get("input"), list):
                fields["input"] = sorted(fields["input"])  # as Snakemake records the set of input files
            text = json.dumps(fields)
            b64 = urlsafe_b64encode(path.encode()).decode()
            parts = [b64[i : i + max_len - 1] for i in range(0, len(b64), max_len - 1)]
            target = metadata.joinpath(*["@" + part for part in parts[:-1]], parts[-1])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return copy
