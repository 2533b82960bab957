"""Shared pieces of the benchmarks: synthetic caches, timing, child processes, the machine.

Nothing here is timed by itself; the bench_* modules time the calls and run_all.py puts the numbers
side by side. Synthetic attention patterns are the softmax of N(0, 2^2) scores under the causal mask
(peaked like trained heads), zero outside each prompt's length x length block, written by headstab's
own cache writer (docs/caches.md). The oracles the engine is checked against are tests/helpers/reference.py's.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

log = logging.getLogger("benchmarks")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tests/helpers/reference.py: the plain loop the engine is compared with
# The paper's l8_h16 architecture: 8 layers of 16 heads (only the pattern shape matters here).
L8_H16 = {"n_layers": 8, "n_heads": 16}


# ---------------------------------------------------------------- timing
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median_seconds(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """(median, all runs, last result) of `repeats` calls; medians resist the noise of a shared machine."""
    runs, result = [], None
    for _ in range(repeats):
        seconds, result = timed(fn)
        runs.append(seconds)
    return statistics.median(runs), runs, result


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def matmul_rate(n: int = 3072, repeats: int = 5) -> dict[str, float]:
    """This machine's float32 matrix-multiply rate, GFLOP/s (2 n^3 per product), numpy and torch.

    `best` (the larger of the two medians) is the denominator of the GEMM fraction: the engine is
    judged against the fastest float32 GEMM this process can run, not against a slow one.
    """
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    flops = 2.0 * n**3
    a @ b  # warm-up (thread pools, page faults)
    numpy_s, _, _ = median_seconds(lambda: a @ b, repeats)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ta @ tb
    torch_s, _, _ = median_seconds(lambda: ta @ tb, repeats)
    rates = {"numpy_gflops": flops / numpy_s / 1e9, "torch_gflops": flops / torch_s / 1e9, "n": n}
    rates["best_gflops"] = max(rates["numpy_gflops"], rates["torch_gflops"])
    return rates


# Runs `python args...` and writes the process's own peak (VmHWM, KiB) at exit. The rusage of os.wait4 is
# no substitute: Linux keeps the forked copy's high-water mark across exec, so ru_maxrss includes the
# parent's RSS at fork time (pytest's, after the integration runs: over 2 GB).
_PEAK_WRAPPER = """
import atexit, os, runpy, sys

def _write_peak():
    with open("/proc/self/status") as status:
        peak = next((line.split()[1] for line in status if line.startswith("VmHWM:")), None)
    if peak is not None:
        with open(os.environ["HEADSTAB_CHILD_PEAK_FILE"], "w") as out:
            out.write(peak)

atexit.register(_write_peak)
if sys.argv[1] == "-c":
    code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_child_measuring_rss(
    args: Sequence[str], timeout: float | None = None, env: dict[str, str] | None = None
) -> tuple[int, float, str]:
    """Run `python args...` as a child process (environment `env`, default ours); (exit code, its own
    peak RSS in GB, its stdout).

    The peak is the child's VmHWM at exit (the real peak of the process, BLAS and HDF5 buffers included,
    which tracemalloc cannot see). Where /proc is missing, or the child leaves by os._exit, it falls back
    to ru_maxrss of os.wait4, which can include the parent's RSS at fork time.
    """
    stem = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_child_{os.getpid()}_{time.monotonic_ns()}"
    out_path, peak_path = stem.with_suffix(".out"), stem.with_suffix(".peak")
    child_env = dict(os.environ if env is None else env, HEADSTAB_CHILD_PEAK_FILE=str(peak_path))
    with open(out_path, "w") as out:
        process = subprocess.Popen([sys.executable, "-c", _PEAK_WRAPPER, *args], stdout=out, cwd=REPO, env=child_env)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.monotonic() > deadline:
                process.kill()
                os.wait4(process.pid, 0)
                raise TimeoutError(f"benchmark child {' '.join(args)} ran past {timeout} s")
            time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)
    stdout = out_path.read_text()
    out_path.unlink(missing_ok=True)
    peak_kib = float(peak_path.read_text()) if peak_path.exists() else float(usage.ru_maxrss)
    peak_path.unlink(missing_ok=True)
    return process.returncode, peak_kib / 1024**2, stdout


def run_json_child(
    script: str | Path, args: Sequence[str], timeout: float | None = None, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], float]:
    """Run `python script args...` (see run_child_measuring_rss): (the JSON result it printed last, its peak
    RSS in GB); a failed child raises RuntimeError with the end of its output."""
    code, peak_gb, stdout = run_child_measuring_rss([str(script), *args], timeout, env)
    if code != 0:
        raise RuntimeError(
            f"benchmark child {Path(script).name} {list(args[:2])} failed with exit code {code}:\n{stdout[-2000:]}"
        )
    return last_json_line(stdout), peak_gb


def last_json_line(stdout: str) -> dict[str, Any]:
    """The last line of a child's stdout that parses as a JSON object (children print one)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"benchmark child printed no JSON result; its output was:\n{stdout[-2000:]}")


# ---------------------------------------------------------------- synthetic patterns
class SyntheticPatternModel:
    """Stand-in for a TransformerBridge that headstab's cache writer can cache.

    It has the attributes the writer uses (cfg, hook_dict, parameters, eval, run_with_cache) and
    returns synthetic causal patterns (and small random hook_resid_mid / hook_z), seeded by `seed` and
    the batch's tokens, so the benchmark's caches go through the real writer and are in the contract
    format (layout, chunking, compression) whatever the writer decides.
    """

    def __init__(self, seed: int, n_layers: int, n_heads: int, n_ctx: int, d_model: int = 8, d_head: int = 2):
        import torch

        self.seed = seed
        self.cfg = SimpleNamespace(n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head, n_ctx=n_ctx)
        hooks = ["attn.hook_pattern", "attn.hook_z", "hook_resid_mid"]
        self.hook_dict = {f"blocks.{layer}.{hook}": None for layer in range(n_layers) for hook in hooks}
        self._parameter = torch.nn.Parameter(torch.zeros(1))

    def parameters(self):
        yield self._parameter

    def eval(self) -> SyntheticPatternModel:
        return self

    def run_with_cache(self, tokens, names_filter=None, **_):  # stop_at_layer: nothing runs after the blocks
        import torch

        cfg = self.cfg
        batch, n_pos = tokens.shape
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + int(tokens.sum()) % 1_000_003)
        causal = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()
        cache = {}
        for layer in range(cfg.n_layers):
            scores = torch.randn(batch, cfg.n_heads, n_pos, n_pos, generator=generator) * 2.0
            cache[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)
            cache[f"blocks.{layer}.attn.hook_z"] = torch.randn(
                batch, n_pos, cfg.n_heads, cfg.d_head, generator=generator
            )
            cache[f"blocks.{layer}.hook_resid_mid"] = torch.randn(batch, n_pos, cfg.d_model, generator=generator)
        if names_filter is not None:
            cache = {name: value for name, value in cache.items() if names_filter(name)}
        return None, cache


def write_synthetic_caches(
    directory: Path,
    n_refits: int,
    n_layers: int,
    n_heads: int,
    n_prompts: int,
    n_pos: int,
    n_distinct: int | None = None,
    promptset: str = "primary",
    compression_level: int | None | str = "default",
    checksum: bool = True,
) -> list[Path]:
    """Activation caches `seed{k}.h5` for k = 1..n_refits, written by headstab's own cache writer.

    Every prompt has n_pos tokens (BOS included). To keep `make bench` inside its time budget, only
    `n_distinct` caches are generated (default: all); refit k > n_distinct is a symlink to cache
    ((k - 1) % n_distinct) + 1. The similarity engine still opens every refit's file and reads its
    patterns in full, so the timed work is the same; only the disk reads of
    repeated files come from the page cache (the benchmark does not measure disk bandwidth).
    compression_level: "default" (the writer's own default, what the workflow writes), a gzip
    level, or None (uncompressed chunks). checksum False: no fletcher32 (to measure its cost; the
    argument is left out when True).
    """
    from headstab.activations.writer import CacheOptions, write_activation_cache

    directory.mkdir(parents=True, exist_ok=True)
    n_distinct = n_refits if n_distinct is None else max(1, min(n_distinct, n_refits))
    rng = np.random.default_rng(12345)
    token_lists = [[0] + rng.integers(1, 1000, size=n_pos - 1).tolist() for _ in range(n_prompts)]
    paths = []
    for refit in range(1, n_refits + 1):
        path = directory / f"seed{refit}.h5"
        paths.append(path)
        if path.exists() or path.is_symlink():
            continue
        if refit <= n_distinct:
            model = SyntheticPatternModel(refit, n_layers, n_heads, n_ctx=max(n_pos, 1))
            options = {} if compression_level == "default" else {"compression_level": compression_level}
            options |= {} if checksum else {"checksum": False}
            write_activation_cache(
                path,
                model,
                {promptset: token_lists},
                pad_token_id=0,
                options=CacheOptions(batch_size=20, show_progress=False, **options),
                attrs={"architecture": f"synthetic_l{n_layers}_h{n_heads}", "seed": refit},
            )
        else:
            path.symlink_to(f"seed{(refit - 1) % n_distinct + 1}.h5")
    return paths


def machine_note() -> dict[str, Any]:
    """Where the numbers came from."""
    import platform

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------- time spent in one library function
class TimedCalls:
    """Replace `module.name` by a wrapper that adds each call's wall time to `seconds` (restored on exit):
    what one step of a timed job costs, measured inside the same run."""

    def __init__(self, module: Any, name: str) -> None:
        self.module, self.name, self.seconds, self.calls = module, name, 0.0, 0

    def __enter__(self) -> TimedCalls:
        original = self.original = getattr(self.module, self.name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        setattr(self.module, self.name, wrapper)
        return self

    def __exit__(self, *exc: Any) -> None:
        setattr(self.module, self.name, self.original)
