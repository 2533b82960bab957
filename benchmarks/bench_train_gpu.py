"""The GPU stage: the training loop at the paper's shape on one CUDA device (skipped without one).

What is timed is `headstab.training.loop.Stack.advance`, the steps a train job runs (each refit's batch
gathered from its own data order and copied to the device, forward, loss, backward, the fused Adam step,
the losses kept on the device), between steps that log, snapshot or checkpoint nothing. The paper's
architectures come from config/config.yaml (batch 5 x 1,024 tokens, d_vocab 48,262; gpt2 at 50,257) on
random token windows; every variant is warmed up before its timed steps, and the device synchronised
around them.

Keys (benchmarks/README.md): train_gpu_mfu (l8_h8, the RECOMMENDED settings compiled: model FLOPs per second
over the device's dense bf16 peak), train_tf32_speedup and train_bf16_sdpa_speedup (k = 1, against fp32 with
materialised attention), train_stack_speedup_k{2,4,8} (tokens per second of a job of k refits over a job of
one: what stacking saves against training the k one after the other),
train_compile_speedup (torch.compile'd loss at the recommended k; the compile time is reported apart, as
train_compile_seconds), train_gpu_peak_mem_gb, train_gpu_syncs_per_step (synchronising CUDA calls per
step between log rows, counted by torch.cuda.set_sync_debug_mode), and train_tokens_per_second_by_arch,
the throughput of one job of k refits, all refits together, for compute.train_tokens_per_second.

Run alone: `python benchmarks/bench_train_gpu.py [--quick] [--out FILE]` (--quick: toy shapes; on a machine
without CUDA it runs on the CPU, to check the code paths).
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

log = logging.getLogger("benchmarks.train_gpu")

# Dense bf16 peak of the devices this stage has run on (FLOP/s; NVIDIA's datasheets, SXM parts).
BF16_PEAK = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}
# The settings the MFU, the compile speedup, the sync count and the per-architecture rates are measured with.
RECOMMENDED = {"precision": "bf16", "attention": "sdpa", "k": 8}
RATE_ARCHITECTURES = ("l2_h8", "l4_h8", "l8_h8", "l8_h16", "gpt2")


def paper_spec(name: str, **overrides: Any) -> Any:
    """Architecture `name` of config/config.yaml, merged as headstab.plan.config does (without the schema, whose
    validator the device machines may lack), one seed, no snapshots."""
    import yaml

    from headstab.plan.spec import BUILT_IN_ARCHITECTURE_DEFAULTS, ArchitectureSpec

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    merged = {**BUILT_IN_ARCHITECTURE_DEFAULTS, **config["architecture_defaults"], **config["architectures"][name]}
    merged["seq_len"] = merged["seq_len"] or merged["n_ctx"]
    fields = {f.name for f in dataclasses.fields(ArchitectureSpec)} - {"name", "seeds", "snapshot_steps"}
    spec = ArchitectureSpec(name=name, seeds=(1,), snapshot_steps=(), **{k: merged[k] for k in fields})
    return dataclasses.replace(spec, **overrides)


def flops_per_token(spec: Any) -> float:
    """Model FLOPs of one trained token: 6 per weight of every matmul (the blocks' and the unembedding's),
    plus attention's scores and mixing, 12 x layers x seq_len x n_heads x d_head (PaLM's count)."""
    weights = spec.n_params + spec.d_model * spec.d_vocab
    return 6.0 * weights + 12.0 * spec.n_layers * spec.seq_len * spec.n_heads * spec.d_head


class NullBar:
    n = 0

    def update(self, count: int) -> None:
        self.n += count


class Job:
    """k refits of `spec` on random windows, set up as train_refits sets them up, ready to step."""

    def __init__(self, spec: Any, k: int, options: Any, work_dir: Path, steps: int):
        import torch

        from headstab.training.loop import Stack
        from headstab.training.options import RefitTarget, TrainingData
        from headstab.training.refit import open_corpus, prepare_refit

        n_windows = steps * spec.batch_size
        self.spec = dataclasses.replace(
            spec, n_tokens=steps * spec.tokens_per_step, epochs=1, log_every=10**9, checkpoint_every=10**9
        )
        work_dir.mkdir(parents=True, exist_ok=True)
        shard = work_dir / "shard_000.npy"
        dtype = np.uint16 if spec.d_vocab <= 2**16 else np.uint32
        np.save(shard, np.random.default_rng(0).integers(0, spec.d_vocab, n_windows * spec.seq_len, dtype=dtype))
        corpus = open_corpus(self.spec, TrainingData.of([shard]))
        refits = [
            prepare_refit(self.spec, corpus, RefitTarget(s, work_dir / f"seed{s}"), options.precision)
            for s in range(1, k + 1)
        ]
        self.device = torch.device(options.device)
        self.stack = Stack(self.spec, corpus, options, self.device)
        self.stack.reform(refits)
        self.bar = NullBar()

    def run(self, n_steps: int) -> float:
        """Wall seconds of the next `n_steps` steps, the device synchronised before and after."""
        import torch

        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        self.stack.advance(self.stack.refits[0].position.step + n_steps, self.bar)
        sync()
        return time.perf_counter() - start

    def syncs_per_step(self, n_steps: int) -> float:
        """Synchronising CUDA calls per step (torch.cuda.set_sync_debug_mode counts them as warnings)."""
        import torch

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                self.stack.advance(self.stack.refits[0].position.step + n_steps, self.bar)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        found = [w for w in caught if "synchroniz" in str(w.message).lower()]
        return len(found) / n_steps


def measure(
    spec: Any, k: int, work_dir: Path, device: str, warmup: int, steps: int, syncs: bool = False, **switches: Any
) -> dict[str, Any]:
    """One variant: seconds per step (the faster of two runs of `steps` steps, pipelined as in training),
    tokens per second (all k refits, and per refit), the first step's seconds, peak device memory."""
    import torch

    from headstab.training.options import TrainingOptions

    options = TrainingOptions(device=device, progress=False, **switches)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    job = Job(spec, k, options, work_dir, warmup + 2 * steps + (8 if syncs else 0) + 2)
    first = job.run(1)  # builds kernels, autotunes, compiles when asked
    job.run(max(0, warmup - 1))
    seconds = min(job.run(steps) / steps for _ in range(2))
    result = {
        "k": k,
        **switches,
        "seconds_per_step": seconds,
        "first_step_seconds": first,
        "tokens_per_second": k * spec.tokens_per_step / seconds,
        "tokens_per_second_per_refit": spec.tokens_per_step / seconds,
    }
    if cuda:
        result["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
        if syncs:
            result["syncs_per_step"] = job.syncs_per_step(8)
    shutil.rmtree(work_dir, ignore_errors=True)
    del job
    return result


def safe(fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """fn's result, or {"error": ...} (an out-of-memory variant does not end the stage)."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 (recorded, the stage goes on)
        log.warning("variant failed: %s: %s", type(err).__name__, err)
        return {"error": f"{type(err).__name__}: {str(err)[:300]}"}


def bench_train_gpu(work_dir: Path, quick: bool = False, device: str = "cuda", out: Path | None = None) -> dict:
    import torch

    torch.backends.cudnn.benchmark = False
    warmup, steps = (1, 2) if quick else (2, 6)
    shapes = (
        {
            "n_layers": 2,
            "d_model": 64,
            "d_head": 16,
            "n_heads": 4,
            "d_mlp": 128,
            "n_ctx": 64,
            "seq_len": 64,
            "d_vocab": 512,
        }
        if quick
        else {}
    )
    l8_h8 = paper_spec("l8_h8", **shapes)
    rec = RECOMMENDED
    details: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "recommended": rec,
    }
    variants: dict[str, Any] = {}

    def run(name: str, spec: Any, k: int, **switches: Any) -> dict[str, Any]:
        log.info("%s", name)
        variants[name] = safe(measure, spec, k, work_dir / name, device, warmup, steps, **switches)
        if out is not None:  # partial results survive a stage cut short
            out.write_text(json.dumps({"details": details, "variants": variants}, indent=1, default=float))
        return variants[name]

    rec_name = f"l8_h8_{rec['precision']}_{rec['attention']}_k{rec['k']}"
    precisions, ks = (("fp32", "bf16"), (2,)) if quick else (("fp32", "tf32", "bf16"), (2, 4, 8))
    for attention in ("materialised", "sdpa"):
        for precision in precisions:
            run(f"l8_h8_{precision}_{attention}_k1", l8_h8, 1, precision=precision, attention=attention)
    for precision in ("bf16", "tf32")[: 1 if quick else 2]:
        for k in ks:
            syncs = device == "cuda" and f"l8_h8_{precision}_sdpa_k{k}" == rec_name
            run(
                f"l8_h8_{precision}_sdpa_k{k}",
                l8_h8,
                k,
                precision=precision,
                attention="sdpa",
                **({"syncs": True} if syncs else {}),
            )
    for arch in RATE_ARCHITECTURES[:1] if quick else RATE_ARCHITECTURES:
        for precision in ("bf16", "tf32")[: 1 if quick else 2]:
            if arch != "l8_h8":
                run(
                    f"{arch}_{precision}_sdpa_k{rec['k']}",
                    paper_spec(arch, **shapes),
                    rec["k"],
                    precision=precision,
                    attention="sdpa",
                )
    compiled = {"error": "not measured on the CPU (inductor's C++ compile takes minutes there)"}
    if device == "cuda":
        compiled = run(
            f"{rec_name}_compiled",
            l8_h8,
            rec["k"],
            precision=rec["precision"],
            attention=rec["attention"],
            compile=True,
        )

    def rate(name: str) -> float | None:
        """Tokens per second of the variant's job, all its refits together."""
        return variants.get(name, {}).get("tokens_per_second")

    def ratio(name: str, reference: str) -> float | None:
        a, b = rate(name), rate(reference)
        return a / b if a and b else None

    stack = f"l8_h8_{rec['precision']}_sdpa"
    summary: dict[str, Any] = {
        "train_tf32_speedup": ratio("l8_h8_tf32_materialised_k1", "l8_h8_fp32_materialised_k1"),
        "train_bf16_sdpa_speedup": ratio("l8_h8_bf16_sdpa_k1", "l8_h8_fp32_materialised_k1"),
        # k refits in one job against k jobs of one, one after the other: tokens per second of the job over k = 1's
        **{f"train_stack_speedup_k{k}": ratio(f"{stack}_k{k}", f"{stack}_k1") for k in (2, 4, 8)},
        "train_compile_speedup": ratio(f"{rec_name}_compiled", rec_name),
        "train_compile_seconds": compiled["first_step_seconds"] - compiled["seconds_per_step"]
        if "error" not in compiled
        else None,
        "train_gpu_peak_mem_gb": variants.get(rec_name, {}).get("peak_mem_gb"),
        "train_gpu_syncs_per_step": variants.get(rec_name, {}).get("syncs_per_step"),
    }
    peak = next((v for key, v in BF16_PEAK.items() if key in details["device"]), None)
    best = rate(f"{rec_name}_compiled") or rate(rec_name)
    summary["train_gpu_mfu"] = best * flops_per_token(l8_h8) / peak if best and peak else None
    summary["train_tokens_per_second_by_arch"] = {
        precision: {arch: rate(f"{arch}_{precision}_sdpa_k{rec['k']}") for arch in RATE_ARCHITECTURES}
        for precision in ("bf16", "tf32")
    }
    details["flops_per_token_l8_h8"] = flops_per_token(l8_h8)
    details["setup"] = (
        f"headstab.training.loop.Stack.advance on {details['device']}, batch {l8_h8.batch_size} x "
        f"{l8_h8.seq_len}, random windows; the faster of two runs of {steps} steps after {warmup} warm-up steps"
    )
    result = {**summary, "details": {**details, "variants": variants}}
    if out is not None:
        out.write_text(json.dumps(result, indent=1, default=float))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="toy shapes, 2 steps per variant (code paths only)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file, rewritten after every variant")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.quick:
        print("train_gpu: skipped, no CUDA device (torch.cuda.is_available() is False); --quick runs it on the CPU")
        return 0
    work_dir = Path(tempfile.mkdtemp(prefix="headstab-bench-gpu-"))
    try:
        result = bench_train_gpu(work_dir, quick=args.quick, device=device, out=args.out)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "details"}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
