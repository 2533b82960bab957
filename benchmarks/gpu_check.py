"""`make gpu-check`: the device checks of the training path, from the committed code, into results/gpu-check/.

    python benchmarks/gpu_check.py                 # on the CUDA device (what `make gpu-check` runs)
    python benchmarks/gpu_check.py --device cpu    # toy sizes on the CPU: the code paths only (make test runs it)

1. `pytest -m gpu` (tests/training/test_gpu.py) on the device: the stack equals single refits, the chunked loss
   equals log_softmax + gather, sdpa equals materialised attention, fused Adam/AdamW step as the unfused ones,
   and on CUDA only the inductor-compiled loss equals eager and a training step makes no synchronising call.
2. The training-loop benchmark (benchmarks/bench_train_gpu.py): the paper's shapes on CUDA, toy shapes on the CPU.
3. results/gpu-check/summary.json and summary.md: the tests' outcome, the benchmark's keys, and `unmeasured`, every
   line of the check this run did not measure (on the CPU: all the GPU numbers), named.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

# What a complete check reports that this script does not measure yet, on any device.
NOT_YET_MEASURED = (
    "every architecture family (l2/l4/l8 x h8/h16, attention-only, GPT-2 small) at the config's seeds_per_job, eager "
    "and compiled, >= 50 timed steps after warm-up: tokens/s, MFU, peak memory",
    "the campaign's GPU-hours recomputed from the measured rates, beside compute.train_tokens_per_second",
    "a paper-shape end-to-end smoke: one stacked job of 8 l2_h8 refits for a few hundred steps, then its caches, "
    "similarity and tables through Snakemake",
)
# Measured only on CUDA: on the CPU these lines stay unmeasured.
CUDA_ONLY = (
    "pytest -m gpu on CUDA: the stack against single refits in fp32, the chunked loss, sdpa, fused Adam",
    "the inductor-compiled loss against eager (test_the_inductor_compiled_loss_equals_eager)",
    "no synchronising call in a training step (test_a_training_step_makes_no_synchronising_call)",
    "bench_train_gpu at the paper's shapes: train_gpu_mfu, the speedups, train_gpu_peak_mem_gb, "
    "train_gpu_syncs_per_step, train_tokens_per_second_by_arch",
)


def run_gpu_tests(device: str, out_dir: Path) -> dict[str, Any]:
    """`pytest -m gpu tests/training/test_gpu.py` on `device`; counts and the names of failed and skipped tests."""
    report = out_dir / "pytest_gpu.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/training/test_gpu.py", "-p", "no:cacheprovider",
               "-q", "-o", "addopts=", f"--junitxml={report}"]  # fmt: skip
    env = {**os.environ, "HEADSTAB_GPU_CHECK_DEVICE": device}
    completed = subprocess.run(command, cwd=common.REPO, env=env, capture_output=True, text=True)
    if not report.is_file():
        raise RuntimeError(f"`{' '.join(command)}` wrote no {report}; its output:\n{completed.stdout[-3000:]}")
    cases = ElementTree.parse(report).getroot().iter("testcase")
    outcome: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for case in cases:
        kinds = {child.tag for child in case}
        kind = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        outcome[kind].append(case.get("name", "?"))
    return {"returncode": completed.returncode, "device": device, **outcome}


def run_bench(device: str, work_dir: Path) -> dict[str, Any]:
    """bench_train_gpu: the paper's shapes on CUDA, its toy shapes elsewhere."""
    import bench_train_gpu

    result = bench_train_gpu.bench_train_gpu(work_dir, quick=device != "cuda", device=device)
    return {key: value for key, value in result.items() if key != "details"} | {"quick": device != "cuda"}


def format_table(summary: dict[str, Any]) -> str:
    tests = summary["pytest_gpu"]
    lines = [
        f"# gpu-check on {summary['device']}",
        "",
        *(
            ["Toy sizes: the code paths only; these are not rates to plan with.", ""]
            if summary["bench"]["quick"]
            else []
        ),
        "| check | result |",
        "| --- | --- |",
        f"| pytest -m gpu | {len(tests['passed'])} passed, {len(tests['failed'])} failed, "
        f"{len(tests['skipped'])} skipped |",
    ]
    for key, value in summary["bench"].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lines.append(f"| {key} | {value:.4g} |")
    lines += ["", "Unmeasured in this run:", *(f"- {line}" for line in summary["unmeasured"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: toy sizes, code paths only")
    parser.add_argument("--out", type=Path, default=common.REPO / "results" / "gpu-check", help="output directory")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here (torch.cuda.is_available() is False); run with --device cpu for toy sizes")
    args.out.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-gpu-check-"))
    try:
        tests = run_gpu_tests(args.device, args.out)
        bench = run_bench(args.device, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    unmeasured = list(NOT_YET_MEASURED) + (list(CUDA_ONLY) if args.device != "cuda" else [])
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    summary = {"device": device, "machine": common.machine_note(), "pytest_gpu": tests, "bench": bench,
               "unmeasured": unmeasured}  # fmt: skip
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    (args.out / "summary.md").write_text(format_table(summary))
    print(format_table(summary))
    return 1 if tests["failed"] or tests["returncode"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
