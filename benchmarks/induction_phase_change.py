"""The cost of the induction phase change in the demo's 2-layer attention-only model.

Trains 2-layer attention-only transformers of the demo's shape (d_model 64, 8 heads of 8, LayerNorm
pre-norm, learned positions, untied unembedding, every bias, every weight ~ N(0, 0.8 / sqrt(d_model)))
and records, per run, when induction heads form and what they cost.

Detectors, on a fixed probe of `PROBE_BATCH` sequences of `seq_len` tokens: `seq_len / 2` distinct
tokens drawn from the training data's tokens, then the same tokens again (Olsson et al. 2022's
repeated random tokens; TransformerLens's head_detector patterns). With A the attention pattern
`blocks.{layer}.attn.hook_pattern` [batch, head, query_pos, key_pos] and n = seq_len / 2:
- induction score of a head: mean over the second copy's positions i (n <= i < 2n) of A[i, i - n + 1],
  the attention to the token after the earlier copy of token i;
- previous-token score: mean over 1 <= i < 2n of A[i, i - 1];
- duplicate-token score: mean over the second copy of A[i, i - n], the earlier copy of token i itself;
- repeated-half loss: mean next-token cross entropy on the predictable targets of the second copy
  (logits at n <= i < 2n - 1), first-half loss the same on the first copy (0 <= i < n - 1).
With `--probe text` (data text) the probe is instead the first half of each of the corpus's last
`PROBE_BATCH` windows (held out of training), then the same half again: repeated real text.
Phase change: `step_induction`, the first evaluated step where the best induction score of layer 1
reaches `--induction-threshold` (0.3); `step_icl`, the first evaluated step where the repeated-half
loss falls below half the first-half loss. CPU seconds are this process's CPU time spent in training
steps (evaluations excluded), with torch on one thread.

Data (`--data`):
- `tokens`: fresh windows every step (never an epoch), Zipfian (`--zipf` exponent, 0 = uniform) tokens
  of a `--vocab`-token vocabulary with planted repeats: a span of `--span LO HI` tokens, `--gap LO HI`
  filler tokens, then the span again, at random offsets; filler between units makes the copies about
  `--repeat-fraction` of each window.
- `text`: the demo pipeline: `headstab.data.synthetic` documents (with `--doc-repeats` verbatim
  repeated spans inserted per document), a byte-level BPE of `--vocab` ids trained on them as rule
  train_tokenizer does, documents joined by EOS, cut into windows and shuffled by the refit's seed;
  `--n-documents` fresh documents (default: enough for every step, one epoch).

Models (`--model`): `plain` (this file's `AttnOnlyGPT`, same state-dict names and forward pass as
`headstab.models.build_model`, checked by tests/test_benchmarks_smoke.py), `bridge` (build_model
itself), or `module:function` returning a model from (ArchitectureSpec, seed) whose `model(tokens)` is
the logits; patterns are always read by loading its state dict into `AttnOnlyGPT`.

    python benchmarks/induction_phase_change.py --quick                      # smoke test, seconds
    python benchmarks/induction_phase_change.py run --vocab 512 --lr 1e-3 --seeds 1 2
    python benchmarks/induction_phase_change.py report                       # table, CSV, PNG

Every run appends a row to results/induction/runs.csv and writes its curve to results/induction/curves/.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results" / "induction"
PROBE_BATCH = 32
LN_EPS = 1e-5  # TransformerLens's LayerNorm eps (cfg.eps)


# ---------------------------------------------------------------- model
class AttnOnlyGPT(nn.Module):
    """TransformerLens's attention-only GPT as build_model builds it, in plain PyTorch.

    State-dict names and shapes are the bridge's (`embed.weight` [vocab, d_model], `blocks.{l}.attn.q.weight`
    [n_heads * d_head, d_model], `unembed.weight` [vocab, d_model], ...), so weights load both ways.
    """

    def __init__(self, n_layers: int, n_heads: int, d_model: int, d_head: int, d_vocab: int, n_ctx: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.embed = nn.Embedding(d_vocab, d_model)
        self.pos_embed = nn.Embedding(n_ctx, d_model)
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            block = nn.Module()
            block.ln1 = nn.LayerNorm(d_model, eps=LN_EPS)
            block.attn = nn.Module()
            for name in "qkv":
                setattr(block.attn, name, nn.Linear(d_model, n_heads * d_head))
            block.attn.o = nn.Linear(n_heads * d_head, d_model)
            self.blocks.append(block)
        self.ln_final = nn.LayerNorm(d_model, eps=LN_EPS)
        self.unembed = nn.Linear(d_model, d_vocab)

    def init_weights(self, std: float, generator: torch.Generator) -> None:
        """Every weight matrix and embedding ~ N(0, std), biases 0, LayerNorm weight 1 (build_model's gpt2 init)."""
        with torch.no_grad():
            for name, tensor in self.state_dict(keep_vars=True).items():
                if name.endswith("bias"):
                    tensor.zero_()
                elif ".ln" in name or name.startswith("ln"):
                    tensor.fill_(1.0)
                else:
                    tensor.normal_(0.0, std, generator=generator)

    def forward(self, tokens: torch.Tensor, patterns: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Logits [batch, pos, vocab] of tokens [batch, pos]; appends each layer's pattern [batch, head, q, k] to `patterns`."""
        batch, n_pos = tokens.shape
        resid = self.embed(tokens) + self.pos_embed.weight[:n_pos]
        causal = torch.ones(n_pos, n_pos, dtype=torch.bool, device=tokens.device).tril()
        for block in self.blocks:
            x = block.ln1(resid)
            q, k, v = (
                getattr(block.attn, n)(x).view(batch, n_pos, self.n_heads, self.d_head).transpose(1, 2) for n in "qkv"
            )
            if patterns is None:  # the fused kernel: same softmax(q k / sqrt(d_head)) v, several times faster
                z = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)
                pattern = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
                patterns.append(pattern.detach())
                z = pattern @ v
            z = z.transpose(1, 2).reshape(batch, n_pos, self.n_heads * self.d_head)
            resid = resid + block.attn.o(z)
        return self.unembed(self.ln_final(resid))


def demo_spec(vocab: int, seq_len: int, n_layers: int = 2, n_heads: int = 8) -> Any:
    """config/demo.yaml's l2_h8_attn with another vocabulary size (ArchitectureSpec); n_heads of d_model / n_heads."""
    from headstab.config import architecture_spec, load_config

    spec = architecture_spec(load_config(REPO / "config" / "demo.yaml"), "l2_h8_attn")
    return dataclasses.replace(
        spec,
        d_vocab=vocab,
        n_layers=n_layers,
        n_ctx=max(spec.n_ctx, seq_len),
        n_heads=n_heads,
        d_head=spec.d_model // n_heads,
    )


def plain_from_spec(spec: Any) -> AttnOnlyGPT:
    if not spec.attn_only or spec.normalization_type != "LN" or spec.positional_embedding_type != "standard":
        raise ValueError(f"AttnOnlyGPT is the attention-only LN model with learned positions, not {spec.name}")
    return AttnOnlyGPT(spec.n_layers, spec.n_heads, spec.d_model, spec.d_head, spec.d_vocab, spec.n_ctx)


def build(model: str, spec: Any, seed: int, init_scale: float = 1.0) -> nn.Module:
    """The model to train: `plain`, `bridge` (headstab.models.build_model) or `module:function(spec, seed)`.

    init_scale multiplies the initial std of every weight (1: build_model's 0.8 / sqrt(d_model)).
    """
    if model == "plain":
        net = plain_from_spec(spec)
        net.init_weights(spec.initializer_range * init_scale, torch.Generator().manual_seed(seed))
        return net
    if model == "bridge":
        from headstab.models import build_model

        net = build_model(spec, seed)
    else:
        module, _, function = model.partition(":")
        net = getattr(importlib.import_module(module), function)(spec, seed)
    if init_scale != 1.0:
        with torch.no_grad():
            for name, tensor in net.state_dict(keep_vars=True).items():
                if name.endswith("weight") and ".ln" not in name and not name.startswith("ln"):
                    tensor.mul_(init_scale)
    return net


# ---------------------------------------------------------------- data
def zipf_probs(vocab: int, exponent: float, first: int = 1) -> np.ndarray:
    """Token probabilities [vocab]: id 0 (EOS) never drawn, ids first.. ~ rank^-exponent (0: uniform)."""
    p = np.zeros(vocab)
    p[first:] = np.arange(1, vocab - first + 1, dtype=float) ** -exponent
    return p / p.sum()


def repeated_span_window(
    rng: np.random.Generator,
    seq_len: int,
    probs: np.ndarray,
    repeat_fraction: float,
    span: tuple[int, int],
    gap: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """One window [seq_len] of tokens ~ probs with planted repeats, and its mask [seq_len] of copied tokens.

    Units of (filler, span of L ~ U[span] tokens, gap ~ U[gap] filler tokens, the span again) follow
    each other from a random offset; the filler before a unit has mean length L / repeat_fraction - 2L - gap,
    so about `repeat_fraction` of the tokens are second copies. mask[i] is True where token i is a copy
    whose previous token is also a copy (predictable by induction).
    """
    tokens = rng.choice(len(probs), size=seq_len, p=probs)
    mask = np.zeros(seq_len, dtype=bool)
    if repeat_fraction <= 0:
        return tokens, mask
    pos = int(rng.integers(0, span[1]))  # a random first offset: copies sit anywhere in the window
    while True:
        length = int(rng.integers(span[0], span[1] + 1))
        between = int(rng.integers(gap[0], gap[1] + 1))
        mean_filler = max(0.0, length / repeat_fraction - 2 * length - between)
        pos += int(rng.integers(0, int(2 * mean_filler) + 1))
        copy = pos + length + between
        if copy + length > seq_len:
            break
        tokens[copy : copy + length] = tokens[pos : pos + length]
        mask[copy + 1 : copy + length] = True
        pos = copy + length
    return tokens, mask


@dataclasses.dataclass
class TokenStream:
    """Fresh windows of planted repeats every step: `tokens` data."""

    vocab: int
    seq_len: int
    zipf: float
    repeat_fraction: float
    span: tuple[int, int]
    gap: tuple[int, int]

    def __post_init__(self) -> None:
        self.probs = zipf_probs(self.vocab, self.zipf)

    def batches(self, seed: int, batch: int) -> Callable[[int], torch.Tensor]:
        rng = np.random.default_rng([seed, 7])

        def next_batch(step: int) -> torch.Tensor:
            rows = [
                repeated_span_window(rng, self.seq_len, self.probs, self.repeat_fraction, self.span, self.gap)[0]
                for _ in range(batch)
            ]
            return torch.from_numpy(np.stack(rows))

        return next_batch

    def probe_tokens(self) -> np.ndarray:
        """Ids the probe may draw: the 2 x seq_len most frequent (all, if fewer)."""
        return np.argsort(-self.probs, kind="stable")[: min(self.vocab - 1, 2 * self.seq_len)]


def text_corpus(
    vocab: int, n_documents: int, doc_repeats: int, doc_seed: int = 0, cache: Path = RESULTS / "corpora"
) -> np.ndarray:
    """The demo pipeline's token stream [token] uint16: synthetic documents, a BPE of `vocab` ids trained on them, EOS between."""
    path = cache / f"synthetic_s{doc_seed}_n{n_documents}_r{doc_repeats}_v{vocab}.npy"
    if path.is_file():
        return np.load(path)
    from headstab.data.shards import tokenize_documents
    from headstab.data.synthetic import generate_synthetic_documents
    from headstab.tokenizer import train_bpe_tokenizer

    documents = list(generate_synthetic_documents(doc_seed, n_documents, repeated_spans=doc_repeats))
    tokenizer = train_bpe_tokenizer(documents, vocab, path.with_suffix(""))
    stream = tokenize_documents(documents, tokenizer, tokenizer.eos_token_id).astype(np.uint16)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, stream)
    return stream


@dataclasses.dataclass
class TextStream:
    """Windows of the demo pipeline's corpus, one epoch in the refit's seeded order: `text` data."""

    stream: np.ndarray
    seq_len: int

    @property
    def n_windows(self) -> int:
        return len(self.stream) // self.seq_len

    def batches(self, seed: int, batch: int) -> Callable[[int], torch.Tensor]:
        if self.n_windows <= PROBE_BATCH:
            raise ValueError(f"the corpus has {self.n_windows} windows, {PROBE_BATCH} are held out: add --n-documents")
        windows = self.stream[: self.n_windows * self.seq_len].reshape(self.n_windows, self.seq_len)
        # training.data.window_order's epoch 0 over every window but the last PROBE_BATCH (held out: text_probe)
        order = np.random.default_rng(seed).permutation(self.n_windows - PROBE_BATCH)

        def next_batch(step: int) -> torch.Tensor:
            ids = order[step * batch : (step + 1) * batch]
            if len(ids) < batch:
                raise IndexError(f"step {step} needs windows past the corpus's {self.n_windows}; add documents")
            return torch.from_numpy(windows[ids].astype(np.int64))

        return next_batch

    def text_probe(self) -> torch.Tensor:
        """[PROBE_BATCH, seq_len]: the first half of each held-out window, then the same again (repeated real text)."""
        half = self.seq_len // 2
        last = self.stream[(self.n_windows - PROBE_BATCH) * self.seq_len : self.n_windows * self.seq_len]
        rows = last.reshape(PROBE_BATCH, self.seq_len)[:, :half]
        return torch.from_numpy(np.tile(rows, 2).astype(np.int64))

    def probe_tokens(self) -> np.ndarray:
        """Ids the probe may draw: the 2 x seq_len most frequent tokens of the corpus, EOS (0) excluded."""
        counts = np.bincount(self.stream, minlength=1)
        counts[0] = 0
        return np.argsort(-counts, kind="stable")[: 2 * self.seq_len]


def probe(ids: np.ndarray, seq_len: int, seed: int = 12345) -> torch.Tensor:
    """[PROBE_BATCH, 2 half]: half = min(seq_len / 2, len(ids)) distinct tokens of `ids`, then the same again."""
    rng = np.random.default_rng(seed)
    half = min(seq_len // 2, len(ids))
    rows = [np.tile(rng.choice(ids, size=half, replace=False), 2) for _ in range(PROBE_BATCH)]
    return torch.from_numpy(np.stack(rows).astype(np.int64))


# ---------------------------------------------------------------- detectors
def head_scores(patterns: Sequence[torch.Tensor], half: int) -> dict[str, np.ndarray]:
    """Induction, previous-token and duplicate-token scores [layer, head] of patterns [batch, head, 2 half, 2 half] per layer."""
    second = torch.arange(half, 2 * half)
    everything = torch.arange(1, 2 * half)
    stacked = torch.stack(list(patterns))  # [layer, batch, head, q, k]
    return {
        "induction": stacked[..., second, second - half + 1].mean(dim=(1, 3)).numpy(),
        "prev_token": stacked[..., everything, everything - 1].mean(dim=(1, 3)).numpy(),
        "duplicate": stacked[..., second, second - half].mean(dim=(1, 3)).numpy(),
    }


def probe_losses(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[float, float]:
    """(first-half, repeated-half) mean next-token loss of the probe: targets 1..half-1 and half+1..2 half-1."""
    half = tokens.shape[1] // 2
    nll = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return float(nll[:, : half - 1].mean()), float(nll[:, half:].mean())


@torch.no_grad()
def evaluate(reader: AttnOnlyGPT, model: nn.Module, tokens: torch.Tensor) -> dict[str, Any]:
    reader.load_state_dict({k: v for k, v in model.state_dict().items()}, strict=True)
    patterns: list[torch.Tensor] = []
    logits = reader(tokens, patterns)
    scores = head_scores(patterns, tokens.shape[1] // 2)
    first, repeated = probe_losses(logits, tokens)
    # positional vs token share of the residual stream that LayerNorm rescales: mean row norms
    pos_norm = float(reader.pos_embed.weight[: tokens.shape[1]].norm(dim=-1).mean())
    embed_norm = float(reader.embed.weight[tokens.unique()].norm(dim=-1).mean())
    return {"scores": scores, "first_half_loss": first, "repeated_loss": repeated, "pos_norm": pos_norm,
            "embed_norm": embed_norm}  # fmt: skip


# ---------------------------------------------------------------- one run
@dataclasses.dataclass
class RunConfig:
    data: str = "tokens"
    vocab: int = 512
    zipf: float = 0.0
    repeat_fraction: float = 0.5
    span: tuple[int, int] = (8, 32)
    gap: tuple[int, int] = (0, 32)
    n_documents: int | None = None
    doc_repeats: int = 0
    batch: int = 16
    seq_len: int = 128
    lr: float = 1e-3
    warmup: int = 0
    optimizer: str = "adam"
    weight_decay: float = 0.0
    steps: int = 2000
    eval_every: int = 25
    stop_after: int = 4  # evaluations after both detectors fired (0: run every step)
    induction_threshold: float = 0.3
    probe: str = "random"  # random: repeated random tokens; text: repeated held-out windows (data text)
    model: str = "plain"
    init_scale: float = 1.0
    n_layers: int = 2
    n_heads: int = 8  # diagnostic: fewer, wider heads (d_head = d_model / n_heads)
    tag: str = ""


def make_data(cfg: RunConfig, out: Path = RESULTS) -> TokenStream | TextStream:
    if cfg.data == "tokens":
        return TokenStream(cfg.vocab, cfg.seq_len, cfg.zipf, cfg.repeat_fraction, cfg.span, cfg.gap)
    if cfg.data == "text":
        n_docs = cfg.n_documents or math.ceil(cfg.steps * cfg.batch * cfg.seq_len / 300) + 50  # ~330 tokens a document
        return TextStream(text_corpus(cfg.vocab, n_docs, cfg.doc_repeats, cache=out / "corpora"), cfg.seq_len)
    raise ValueError(f"--data must be tokens or text, got {cfg.data!r}")


def first_step(curve: list[dict[str, Any]], key: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    return next((row for row in curve if key(row)), None)


def train_run(cfg: RunConfig, seed: int, data: TokenStream | TextStream, log: Callable[[str], None] = print) -> dict:
    """Train one model; returns its row (settings, detector steps, final scores) and its curve."""
    torch.manual_seed(seed)
    spec = demo_spec(cfg.vocab, cfg.seq_len, cfg.n_layers, cfg.n_heads)
    model = build(cfg.model, spec, seed, cfg.init_scale)
    model.train()
    reader = plain_from_spec(spec)
    probe_batch = data.text_probe() if cfg.probe == "text" else probe(data.probe_tokens(), cfg.seq_len)
    if cfg.optimizer == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    else:
        optimizer = torch.optim.Adam(model.parameters(), cfg.lr)
    next_batch = data.batches(seed, cfg.batch)
    curve: list[dict[str, Any]] = []
    cpu = 0.0
    losses: list[float] = []
    fired_at: int | None = None
    step = 0
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = evaluate(reader, model, probe_batch)
            s = ev["scores"]
            row = {
                "step": step, "cpu_s": round(cpu, 3), "train_loss": float(np.mean(losses[-cfg.eval_every:])) if losses else None,
                "first_half_loss": ev["first_half_loss"], "repeated_loss": ev["repeated_loss"],
                "induction_l1": float(s["induction"][-1].max()), "prev_token_l0": float(s["prev_token"][0].max()),
                "duplicate_l0": float(s["duplicate"][0].max()), "pos_norm": ev["pos_norm"], "embed_norm": ev["embed_norm"],
                "induction": s["induction"].round(4).tolist(),
                "prev_token": s["prev_token"].round(4).tolist(),
            }  # fmt: skip
            curve.append(row)
            fired = (
                row["induction_l1"] >= cfg.induction_threshold and row["repeated_loss"] < 0.5 * row["first_half_loss"]
            )
            if fired and fired_at is None:
                fired_at = len(curve)
            if step % (cfg.eval_every * 8) == 0 or step == cfg.steps:
                log(f"  step {step:5d} cpu {cpu:6.1f}s loss {row['train_loss'] or 0:.3f} probe {row['first_half_loss']:.2f}"
                    f"/{row['repeated_loss']:.2f} ind {row['induction_l1']:.2f} prev {row['prev_token_l0']:.2f}")  # fmt: skip
            if step == cfg.steps or (
                cfg.stop_after and fired_at is not None and len(curve) - fired_at >= cfg.stop_after
            ):
                break
        start = time.process_time()
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) if cfg.warmup else cfg.lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        tokens = next_batch(step)
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        cpu += time.process_time() - start
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            log(f"  diverged at step {step}")
            break
    ind = first_step(curve, lambda r: r["induction_l1"] >= cfg.induction_threshold)
    icl = first_step(curve, lambda r: r["repeated_loss"] < 0.5 * r["first_half_loss"])
    last = curve[-1]
    row = {
        **{k: (f"{v[0]}-{v[1]}" if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()},
        "seed": seed,
        "step_induction": ind["step"] if ind else None,
        "tokens_induction": ind["step"] * cfg.batch * cfg.seq_len if ind else None,
        "cpu_s_induction": ind["cpu_s"] if ind else None,
        "step_icl": icl["step"] if icl else None,
        "cpu_s_icl": icl["cpu_s"] if icl else None,
        "steps_run": last["step"],
        "cpu_s_per_step": round(last["cpu_s"] / max(1, last["step"]), 5),
        "final_train_loss": round(last["train_loss"], 4) if last["train_loss"] is not None else None,
        "final_repeated_loss": round(last["repeated_loss"], 4),
        "final_first_half_loss": round(last["first_half_loss"], 4),
        "best_induction_l1": round(max(r["induction_l1"] for r in curve), 4),
        "final_induction_l1": round(last["induction_l1"], 4),
        "final_prev_token_l0": round(last["prev_token_l0"], 4),
        "best_prev_token_l0": round(max(r["prev_token_l0"] for r in curve), 4),
        "final_duplicate_l0": round(last["duplicate_l0"], 4),
    }
    return {"row": row, "curve": curve}


# ---------------------------------------------------------------- files
def save(result: dict, out: Path) -> None:
    row = result["row"]
    (out / "curves").mkdir(parents=True, exist_ok=True)
    name = f"{row['tag'] or 'run'}_{int(time.time() * 1e3)}_s{row['seed']}.json"
    (out / "curves" / name).write_text(json.dumps(result))
    path = out / "runs.csv"
    rows = read_rows(path)
    rows.append({k: ("" if v is None else v) for k, v in row.items()})
    fields = list(dict.fromkeys(k for r in rows for k in r))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def report(out: Path, tags: Sequence[str] | None = None) -> str:
    """Markdown table: one line per setting (its tag) over seeds: steps, tokens, CPU s to the change, final scores."""
    rows = [r for r in read_rows(out / "runs.csv") if not tags or r["tag"] in tags]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["tag"], []).append(r)

    def med(values: list[float], fmt: str) -> str:
        return format(float(np.median(values)), fmt) if values else "-"

    def data(k: dict) -> str:
        if k["data"] == "text":
            return f"text, {k.get('doc_repeats', 0)} repeated spans/doc"
        return f"tokens zipf {k['zipf']}, repeat {k['repeat_fraction']}, span {k['span']}, gap {k['gap']}"

    header = ("tag", "data", "vocab", "seq", "heads", "batch", "lr", "warm-up", "optimizer", "init x", "probe",
              "formed", "steps to induction >= 0.3", "tokens", "CPU s", "CPU ms/step", "final ind L1", "max prev L0",
              "final probe loss 1st/2nd")  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for tag, group in groups.items():
        k = group[0]
        steps = [int(r["step_induction"]) if r["step_induction"] else None for r in group]
        done = [s for s in steps if s is not None]
        shown = ", ".join(str(s) if s is not None else f">{r['steps_run']}" for s, r in zip(steps, group))
        opt = k["optimizer"] + (f" wd {k['weight_decay']}" if float(k["weight_decay"] or 0) else "")
        cells = (
            tag, data(k), k["vocab"], k["seq_len"], k.get("n_heads") or 8, k["batch"], k["lr"], k["warmup"], opt,
            k["init_scale"], k.get("probe") or "random", f"{len(done)}/{len(group)}", shown,
            med([s * int(k["batch"]) * int(k["seq_len"]) for s in done], ",.0f"),
            med([float(r["cpu_s_induction"]) for r in group if r["cpu_s_induction"]], ".0f"),
            med([1e3 * float(r["cpu_s_per_step"]) for r in group], ".0f"),
            med([float(r["final_induction_l1"]) for r in group], ".2f"),
            med([float(r["best_prev_token_l0"]) for r in group], ".2f"),
            f"{med([float(r['final_first_half_loss']) for r in group], '.2f')}/"
            f"{med([float(r['final_repeated_loss']) for r in group], '.2f')}",
        )  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def plot(out: Path, tags: Sequence[str]) -> Path:
    """Induction score of layer 1 and repeated-half probe loss against step, one line per run of the tags."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for path in sorted((out / "curves").glob("*.json")):
        result = json.loads(path.read_text())
        if tags and result["row"]["tag"] not in tags:
            continue
        steps = [r["step"] for r in result["curve"]]
        label = f"{result['row']['tag']} s{result['row']['seed']}"
        ax1.plot(steps, [r["induction_l1"] for r in result["curve"]], label=label, lw=1)
        ax2.plot(steps, [r["repeated_loss"] for r in result["curve"]], label=label, lw=1)
    ax1.axhline(0.3, color="grey", ls=":")
    ax1.set(xlabel="step", ylabel="best induction score, layer 1")
    ax2.set(xlabel="step", ylabel="probe loss, repeated half (nats)")
    ax1.legend(fontsize=6)
    fig.tight_layout()
    target = out / f"curves_{'_'.join(tags) or 'all'}.png"
    fig.savefig(target, dpi=120)
    return target


# ---------------------------------------------------------------- command line
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "report"])
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny runs of both data kinds, seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tags", nargs="*", default=[], help="report: only these tags")
    parser.add_argument("--threads", type=int, default=1)
    defaults = RunConfig()
    for field in dataclasses.fields(RunConfig):
        value = getattr(defaults, field.name)
        flag = "--" + field.name.replace("_", "-")
        if isinstance(value, tuple):
            parser.add_argument(flag, type=int, nargs=2, default=value)
        elif isinstance(value, bool) or value is None:
            parser.add_argument(flag, type=int, default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.command == "report":
        print(report(args.out, args.tags))
        print(plot(args.out, args.tags))
        return []
    cfg = RunConfig(**{f.name: (tuple(v) if isinstance(v, list) else v) for f in dataclasses.fields(RunConfig)
                       for v in [getattr(args, f.name)]})  # fmt: skip
    configs = [cfg]
    if args.quick:
        quick = dict(steps=20, eval_every=10, vocab=300, batch=4, stop_after=0)
        configs = [
            dataclasses.replace(cfg, **quick, tag="quick_tokens"),
            dataclasses.replace(
                cfg, **quick, tag="quick_text", data="text", n_documents=20, doc_repeats=2, probe="text"
            ),
        ]
        args.seeds = args.seeds[:1]
    results = []
    for run_cfg in configs:
        data = make_data(run_cfg, args.out)
        for seed in args.seeds:
            print(f"{run_cfg.tag or 'run'} seed {seed}: {run_cfg}", flush=True)
            result = train_run(run_cfg, seed, data)
            save(result, args.out)
            r = result["row"]
            print(f"  -> induction >= {run_cfg.induction_threshold} at step {r['step_induction']} ({r['cpu_s_induction']} CPU s), "
                  f"icl at {r['step_icl']}, {r['cpu_s_per_step'] * 1e3:.1f} ms/step, final ind {r['final_induction_l1']} "
                  f"prev {r['final_prev_token_l0']}", flush=True)  # fmt: skip
            results.append(result)
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    main()
