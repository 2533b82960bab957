"""The cost of the induction phase change in the demo's 2-layer attention-only model.

Trains k seeds of config/demo.yaml's `l2_h8_attn` shape at once as one `headstab.training.model.
StackedTransformer` (d_model 64, 8 heads of 8, LayerNorm, learned positions, untied unembedding, every
weight ~ N(0, 0.8 / sqrt(d_model)); seed i bit-identical to `build_model(spec, seed_i)` and to training
it alone) and records, per seed, when induction heads form and what they cost.

Detectors read `blocks.{layer}.attn.hook_pattern` [prompt, head, query_pos, key_pos] of the refit's
TransformerBridge (`build_model` with the seed's state dict loaded) on a fixed probe. A probe marks,
for every query position i, the key its induction head should read (-1: none):
- `random` (Olsson et al. 2022's repeated random tokens): `PROBE_PROMPTS` rows of n = seq_len / 2
  distinct frequent tokens, then the same n again; query i >= n reads i - n + 1.
- `text`: the first half of each of the corpus's last `PROBE_PROMPTS` windows (held out), twice.
- `spans`: `span_prompts`, 40-80-token pieces of held-out synthetic documents (data text) or of fresh
  token draws without planted repeats (tokens, halves) with a span of 6-16 tokens repeated after a gap
  of 0-24 tokens at a random place (never a fixed offset).
Scores of a head: induction = mean attention from each marked query to its key; previous-token = mean
A[i, i - 1] (i >= 1); duplicate = mean attention from each marked query to the earlier copy of its own
token. Losses: next-token loss on the copies' predictable tokens (`copy_loss`) and on the same tokens
at their first occurrence (`source_loss`). Phase change: `step_induction`, the first evaluated step
where layer 1's best induction score reaches `--induction-threshold`; `step_icl`, the first where the
copy loss falls below half the source loss. CPU seconds: this process's CPU time in training steps
(evaluations excluded) divided by the stack's k, with torch on one thread unless `--threads`.

Data (`--data`), fresh windows or documents every step, each seed its own order:
- `tokens`: Zipfian (`--zipf`, 0 = uniform) tokens of a `--vocab`-id vocabulary with planted repeats:
  a span of `--span LO HI` tokens, `--gap LO HI` filler tokens, then the span again, at random offsets,
  about `--repeat-fraction` of each window second copies.
- `halves`: n = seq_len / 2 uniform tokens, then the same n again (the known-good repeated sequence).
- `markov`: Edelman et al. 2024's in-context Markov chains: every window draws its own transition matrix
  over `--vocab` states (rows ~ Dirichlet(1)), then a chain from its uniform start.
- `text`: the demo pipeline: `headstab.data.synthetic` documents (`--doc-repeats` verbatim repeated
  spans per document), a byte-level BPE of `--vocab` ids trained on them as rule train_tokenizer does,
  EOS after each document, cut into windows, one epoch in the seed's order (training.data.window_order);
  `--n-documents` (default: enough for every step).

    python benchmarks/induction_phase_change.py --quick                      # smoke test, seconds
    python benchmarks/induction_phase_change.py run --vocab 64 --lr 1e-3 --seeds 1 2 3 4
    python benchmarks/induction_phase_change.py report                       # table and PNG

Every run appends one row per seed to results/induction/runs.csv and writes its curves to
results/induction/curves/.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from headstab.data.planted import plant_repeats  # noqa: E402
from headstab.plan.config import architecture_spec, load_config  # noqa: E402
from headstab.plan.spec import ArchitectureSpec  # noqa: E402
from headstab.training.model import StackedTransformer  # noqa: E402

RESULTS = REPO / "results" / "induction"
PROBE_PROMPTS = 32
SPAN_PROMPT_DOC_SEED = 99  # held-out synthetic documents for the `spans` probe (the corpora use 0 and 1)


def demo_spec(vocab: int, seq_len: int, n_layers: int = 2, n_ctx: int | None = None) -> ArchitectureSpec:
    """config/demo.yaml's l2_h8_attn with another vocabulary, n_layers and context (n_ctx >= seq_len)."""
    with contextlib.chdir(REPO):  # the config's prompt files are relative to the repository
        spec = architecture_spec(load_config("config/demo.yaml"), "l2_h8_attn")
    return dataclasses.replace(spec, d_vocab=vocab, n_layers=n_layers, n_ctx=max(n_ctx or spec.n_ctx, seq_len),
                               seq_len=seq_len)  # fmt: skip


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
    """One window [seq_len] of tokens ~ probs with planted repeats (`headstab.data.planted.plant_repeats`: about
    `repeat_fraction` of the tokens second copies, up to the generator's ceiling), and its mask [seq_len] of the
    copies whose previous token is a copy too (predictable by induction)."""
    tokens = rng.choice(len(probs), size=seq_len, p=probs)
    return tokens, plant_repeats(rng, tokens, repeat_fraction, span, gap)


def markov_window(rng: np.random.Generator, seq_len: int, n_states: int) -> np.ndarray:
    """[seq_len] states of a chain whose transition rows are drawn ~ Dirichlet(1) for this window alone."""
    transitions = rng.dirichlet(np.ones(n_states), size=n_states).cumsum(axis=1)
    draws = rng.random(seq_len)
    states = np.empty(seq_len, dtype=np.int64)
    states[0] = int(draws[0] * n_states)
    for i in range(1, seq_len):
        states[i] = min(int(np.searchsorted(transitions[states[i - 1]], draws[i])), n_states - 1)
    return states


@dataclasses.dataclass
class SyntheticStream:
    """Fresh token windows every step (never an epoch): `tokens`, `halves` or `markov` data."""

    kind: str
    vocab: int
    seq_len: int
    zipf: float = 0.0
    repeat_fraction: float = 0.5
    span: tuple[int, int] = (8, 32)
    gap: tuple[int, int] = (0, 32)

    def __post_init__(self) -> None:
        self.probs = zipf_probs(self.vocab, self.zipf)

    def window(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "halves":
            half = rng.integers(1, self.vocab, size=self.seq_len // 2)
            return np.resize(half, self.seq_len)  # the half twice (and its first token again if seq_len is odd)
        if self.kind == "markov":
            return markov_window(rng, self.seq_len, self.vocab)
        return repeated_span_window(rng, self.seq_len, self.probs, self.repeat_fraction, self.span, self.gap)[0]

    def batches(self, seed: int, batch: int) -> Callable[[int], np.ndarray]:
        rng = np.random.default_rng([seed, 7])
        return lambda step: np.stack([self.window(rng) for _ in range(batch)])

    def heldout_documents(self, n_documents: int = 60, length: int = 120) -> list[np.ndarray]:
        """Token draws ~ probs without planted repeats, from a seed no training stream uses (span prompts' source)."""
        rng = np.random.default_rng([SPAN_PROMPT_DOC_SEED, 0])
        return list(rng.choice(len(self.probs), size=(n_documents, length), p=self.probs))

    def probe_tokens(self) -> np.ndarray:
        """Ids the random probe may draw: the 2 x seq_len most frequent (all, if fewer)."""
        first = 0 if self.kind == "markov" else 1
        return (
            np.argsort(-self.probs[first:] if first else -np.ones(self.vocab), kind="stable")[: 2 * self.seq_len]
            + first
        )


def text_corpus(
    vocab: int, n_documents: int, doc_repeats: int, doc_seed: int = 0, cache: Path = RESULTS / "corpora"
) -> tuple[np.ndarray, Path]:
    """The demo pipeline's token stream [token] uint16 (synthetic documents, a BPE of `vocab` ids, EOS after each), its tokenizer dir."""
    path = cache / f"synthetic_s{doc_seed}_n{n_documents}_r{doc_repeats}_v{vocab}.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.with_suffix(".lock")):  # parallel runs of a sweep build each corpus once
        if not path.is_file():
            build_text_corpus(path, vocab, n_documents, doc_repeats, doc_seed)
    return np.load(path), path.with_suffix("")


def build_text_corpus(path: Path, vocab: int, n_documents: int, doc_repeats: int, doc_seed: int) -> None:
    from headstab.data.shards import tokenize_documents
    from headstab.data.synthetic import generate_synthetic_documents
    from headstab.refits.tokenizer import train_bpe_tokenizer

    documents = list(generate_synthetic_documents(doc_seed, n_documents, repeated_spans=doc_repeats))
    tokenizer = train_bpe_tokenizer(documents, vocab, path.with_suffix(""))
    stream = tokenize_documents(documents, tokenizer, tokenizer.eos_token_id).astype(np.uint16)
    np.save(path.with_suffix(".tmp.npy"), stream)
    os.replace(path.with_suffix(".tmp.npy"), path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) for the body."""
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclasses.dataclass
class TextStream:
    """Windows of the demo pipeline's corpus, one epoch in each seed's order: `text` data."""

    stream: np.ndarray
    seq_len: int
    tokenizer_dir: Path | None = None

    @property
    def n_windows(self) -> int:
        return len(self.stream) // self.seq_len

    def batches(self, seed: int, batch: int) -> Callable[[int], np.ndarray]:
        from headstab.training.data import window_order

        if self.n_windows <= PROBE_PROMPTS:
            raise ValueError(
                f"the corpus has {self.n_windows} windows, {PROBE_PROMPTS} are held out: add --n-documents"
            )
        windows = self.stream[: self.n_windows * self.seq_len].reshape(self.n_windows, self.seq_len)
        order = window_order(self.n_windows - PROBE_PROMPTS, seed, self.n_windows - PROBE_PROMPTS)

        def next_batch(step: int) -> np.ndarray:
            ids = order[step * batch : (step + 1) * batch]
            if len(ids) < batch:
                raise IndexError(f"step {step} needs windows past the corpus's {self.n_windows}; add documents")
            return windows[ids].astype(np.int64)

        return next_batch

    def held_out_halves(self) -> np.ndarray:
        """[PROBE_PROMPTS, seq_len / 2]: the first half of each of the last PROBE_PROMPTS windows."""
        last = self.stream[(self.n_windows - PROBE_PROMPTS) * self.seq_len : self.n_windows * self.seq_len]
        return last.reshape(PROBE_PROMPTS, self.seq_len)[:, : self.seq_len // 2].astype(np.int64)

    def probe_tokens(self) -> np.ndarray:
        """Ids the random probe may draw: the 2 x seq_len most frequent tokens of the corpus, EOS (0) excluded."""
        counts = np.bincount(self.stream, minlength=1)
        counts[0] = 0
        return np.argsort(-counts, kind="stable")[: 2 * self.seq_len]


# ---------------------------------------------------------------- probes
@dataclasses.dataclass
class Probe:
    """Prompts with the keys an induction head should read.

    tokens: [prompt, pos], right-padded; lengths: [prompt] tokens before the padding;
    induction_key, duplicate_key: [prompt, pos] key index for query pos (-1: none);
    copy_mask: [prompt, pos] token pos is predictable by induction; source_mask: the same tokens' first occurrence.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    induction_key: np.ndarray
    duplicate_key: np.ndarray
    copy_mask: np.ndarray
    source_mask: np.ndarray


def repeated_probe(halves: np.ndarray) -> Probe:
    """Each row of halves [prompt, n] twice: query i >= n reads i - n + 1 (its duplicate: i - n)."""
    n_prompts, n = halves.shape
    pos = np.arange(2 * n)
    second = pos >= n
    induction = np.where(second, pos - n + 1, -1)
    duplicate = np.where(second, pos - n, -1)
    copy_mask = pos > n
    source_mask = (pos >= 1) & (pos < n)
    tile = lambda row: np.tile(row, (n_prompts, 1))  # noqa: E731
    lengths = np.full(n_prompts, 2 * n)
    return Probe(np.tile(halves, 2), lengths, tile(induction), tile(duplicate), tile(copy_mask), tile(source_mask))


def random_probe(ids: np.ndarray, seq_len: int, seed: int = 12345) -> Probe:
    """PROBE_PROMPTS rows of min(seq_len / 2, len(ids)) distinct tokens of `ids`, then the same again."""
    rng = np.random.default_rng(seed)
    half = min(seq_len // 2, len(ids))
    return repeated_probe(np.stack([rng.choice(ids, size=half, replace=False) for _ in range(PROBE_PROMPTS)]))


def span_prompt(
    rng: np.random.Generator, document: np.ndarray, length: tuple[int, int], span: tuple[int, int], gap: tuple[int, int]
) -> tuple[np.ndarray, int, int, int] | None:
    """A piece of `document` with one of its spans repeated: (tokens, source start, copy start, span length).

    The prompt is `before` document tokens, a span of L ~ U[span] of them, `between` ~ U[gap] more, then
    the span again and document tokens up to a total of U[length]; the span's place is uniform in the
    prompt, so its offset and its distance to the copy vary. None if the document is too short.
    """
    total = int(rng.integers(length[0], length[1] + 1))
    n_span = int(rng.integers(span[0], span[1] + 1))
    between = int(rng.integers(gap[0], gap[1] + 1))
    n_own = total - n_span  # document tokens in the prompt; the copy is the rest
    if n_own > len(document) or n_own < n_span + between:
        return None
    start = int(rng.integers(0, len(document) - n_own + 1))
    piece = document[start : start + n_own]
    source = int(rng.integers(0, n_own - n_span - between + 1))
    copy = source + n_span + between
    tokens = np.concatenate([piece[:copy], piece[source : source + n_span], piece[copy:]])
    return tokens, source, copy, n_span


def span_prompts(
    documents: Sequence[np.ndarray],
    n_prompts: int,
    seed: int = 0,
    length: tuple[int, int] = (40, 80),
    span: tuple[int, int] = (6, 16),
    gap: tuple[int, int] = (0, 24),
) -> Probe:
    """`n_prompts` span prompts (span_prompt) from `documents` [token] each, right-padded with EOS (0).

    A query inside the copy (after its first token) reads the token after its source; padding marks nothing.
    """
    rng = np.random.default_rng(seed)
    made: list[tuple[np.ndarray, int, int, int]] = []
    while len(made) < n_prompts:
        prompt = span_prompt(rng, documents[int(rng.integers(len(documents)))], length, span, gap)
        if prompt is not None:
            made.append(prompt)
    width = max(len(p[0]) for p in made)
    tokens = np.zeros((n_prompts, width), dtype=np.int64)
    induction, duplicate = np.full_like(tokens, -1), np.full_like(tokens, -1)
    copy_mask, source_mask = np.zeros(tokens.shape, bool), np.zeros(tokens.shape, bool)
    for row, (prompt, source, copy, n_span) in enumerate(made):
        tokens[row, : len(prompt)] = prompt
        offsets = np.arange(n_span)
        induction[row, copy + offsets[:-1]] = source + offsets[:-1] + 1
        duplicate[row, copy + offsets] = source + offsets
        copy_mask[row, copy + offsets[1:]] = True
        source_mask[row, source + offsets[1:]] = True
    lengths = np.array([len(p[0]) for p in made])
    return Probe(tokens, lengths, induction, duplicate, copy_mask, source_mask)


def heldout_documents(tokenizer_dir: Path, n_documents: int = 60, doc_seed: int = SPAN_PROMPT_DOC_SEED) -> list:
    """Held-out synthetic documents (no inserted repeats) as token arrays of the corpus's tokenizer."""
    from headstab.data.synthetic import generate_synthetic_documents
    from headstab.refits.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    return [
        np.asarray(tokenizer.encode(doc), dtype=np.int64) for doc in generate_synthetic_documents(doc_seed, n_documents)
    ]


# ---------------------------------------------------------------- detectors
def head_scores(patterns: torch.Tensor, probe: Probe) -> dict[str, np.ndarray]:
    """Induction, previous-token and duplicate-token scores [layer, head] of patterns [layer, prompt, head, q, k].

    Each is the mean attention from the probe's marked queries to their keys (prev-token: i -> i - 1, i >= 1).
    Padding of shorter prompts is never marked, so it never counts.
    """
    pos = np.arange(patterns.shape[3])
    prev_key = np.where((pos >= 1) & (pos < probe.lengths[:, None]), pos - 1, -1)  # [prompt, pos]
    scores = {}
    for name, keys in (
        ("induction", probe.induction_key),
        ("prev_token", prev_key),
        ("duplicate", probe.duplicate_key),
    ):
        prompt, query = np.nonzero(keys >= 0)
        read = patterns[:, prompt, :, query, keys[prompt, query]]  # [query, layer, head]: advanced dims first
        scores[name] = read.mean(dim=0).numpy()
    return scores


def probe_losses(logits: torch.Tensor, probe: Probe) -> tuple[float, float]:
    """(source, copy) mean next-token loss [nats] of the probe's marked tokens; logits [prompt, pos, vocab]."""
    tokens = torch.from_numpy(probe.tokens)
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), tokens[:, 1:], reduction="none")
    source, copy = torch.from_numpy(probe.source_mask[:, 1:]), torch.from_numpy(probe.copy_mask[:, 1:])
    return float(nll[source].mean()), float(nll[copy].mean())


@torch.no_grad()
def stack_patterns(stack: StackedTransformer, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [seed, prompt, pos, vocab], hook_pattern [layer, seed, prompt, head, query_pos, key_pos]) of tokens [prompt, pos].

    Every seed reads the same prompts. The patterns are recomputed from each block's attention input
    (caught by a forward hook) with the stack's own W_QKV: softmax(q k^T / sqrt(d_head)) under the causal
    mask, TransformerBridge's `blocks.{layer}.attn.hook_pattern` (tests/workflow/test_benchmarks_smoke.py).
    """
    k, (n_prompts, n_pos) = stack.n_seeds, tokens.shape
    inputs: list[torch.Tensor] = []
    handles = [block.attn.register_forward_hook(lambda module, args, out: inputs.append(args[0]))
               for block in stack.blocks]  # fmt: skip
    try:
        logits = stack(tokens.expand(k, n_prompts, n_pos))
    finally:
        for handle in handles:
            handle.remove()
    patterns = []
    for block, x in zip(stack.blocks, inputs):
        attn = block.attn
        qkv = torch.baddbmm(attn.b_QKV[:, None], x, attn.W_QKV)
        q, key, _ = qkv.view(k * n_prompts, n_pos, 3, attn.n_heads, attn.d_head).permute(2, 0, 3, 1, 4).unbind(0)
        if stack.rotary is not None:
            q, key = stack.rotary(q), stack.rotary(key)
        scores = (q @ key.transpose(-1, -2)) * attn.d_head**-0.5 + stack.causal_mask[:n_pos, :n_pos]
        patterns.append(scores.softmax(dim=-1).view(k, n_prompts, attn.n_heads, n_pos, n_pos))
    return logits, torch.stack(patterns)


def evaluate(stack: StackedTransformer, probes: dict[str, Probe]) -> list[dict[str, Any]]:
    """Per seed: {probe name: {"scores": head_scores, "source_loss", "copy_loss"}}."""
    device = next(stack.parameters()).device
    results: list[dict[str, Any]] = [{} for _ in range(stack.n_seeds)]
    for name, probe in probes.items():
        logits, patterns = stack_patterns(stack, torch.from_numpy(probe.tokens).to(device))
        logits, patterns = logits.float().cpu(), patterns.float().cpu()
        for i, result in enumerate(results):
            source, copy = probe_losses(logits[i], probe)
            result[name] = {"scores": head_scores(patterns[:, i], probe), "source_loss": source, "copy_loss": copy}
    return results


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
    n_ctx: int | None = None  # default: the demo's (256), at least seq_len
    lr: float = 1e-3
    warmup: int = 0
    optimizer: str = "adam"
    weight_decay: float = 0.0
    steps: int = 2000
    eval_every: int = 25
    stop_after: int = 4  # evaluations after every seed's detectors fired (0: run every step)
    induction_threshold: float = 0.3
    probe: str = "random"  # random | text | spans: the probe of the phase-change detectors
    n_layers: int = 2
    device: str = "cpu"
    max_seconds: float = 0.0  # stop (and evaluate) after this many wall seconds; 0: never
    tag: str = ""


def make_data(cfg: RunConfig, out: Path = RESULTS) -> SyntheticStream | TextStream:
    if cfg.data in ("tokens", "halves", "markov"):
        return SyntheticStream(cfg.data, cfg.vocab, cfg.seq_len, cfg.zipf, cfg.repeat_fraction, cfg.span, cfg.gap)
    if cfg.data == "text":
        # every seed reads the same corpus in its own order, as the workflow's refits do: one epoch of it
        windows = cfg.steps * cfg.batch + PROBE_PROMPTS
        n_docs = cfg.n_documents or math.ceil(windows * cfg.seq_len / 300) + 50  # ~330 tokens a document
        stream, tokenizer_dir = text_corpus(cfg.vocab, n_docs, cfg.doc_repeats, cache=out / "corpora")
        return TextStream(stream, cfg.seq_len, tokenizer_dir)
    raise ValueError(f"--data must be tokens, halves, markov or text, got {cfg.data!r}")


def make_probes(cfg: RunConfig, data: SyntheticStream | TextStream) -> dict[str, Probe]:
    """The detectors' probe (`cfg.probe`) first, then the others the data allows."""
    probes = {"random": random_probe(data.probe_tokens(), cfg.seq_len)}
    if isinstance(data, SyntheticStream) and data.kind != "markov":
        probes["spans"] = span_prompts(data.heldout_documents(), PROBE_PROMPTS)
    if isinstance(data, TextStream):
        probes["text"] = repeated_probe(data.held_out_halves())
        if data.tokenizer_dir is not None:
            probes["spans"] = span_prompts(heldout_documents(data.tokenizer_dir), PROBE_PROMPTS)
    if cfg.probe not in probes:
        raise ValueError(f"--probe {cfg.probe} is not made for --data {cfg.data}; it has probes {', '.join(probes)}")
    return {cfg.probe: probes.pop(cfg.probe), **probes}


def first_step(curve: list[dict[str, Any]], key: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    return next((row for row in curve if key(row)), None)


def train_stack(
    cfg: RunConfig,
    seeds: Sequence[int],
    data: SyntheticStream | TextStream,
    log: Callable[[str], None] = print,
    weights_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """Train len(seeds) refits as one stack; returns per seed its row (settings, detector steps, scores) and curve.

    weights_dir: where each refit's final weights go as a TransformerBridge state dict, {tag}_s{seed}.pt.
    """
    device = torch.device(cfg.device)
    spec = demo_spec(cfg.vocab, cfg.seq_len, cfg.n_layers, cfg.n_ctx)
    stack = StackedTransformer.from_seeds(spec, seeds, device, attention="sdpa")
    stack.train()
    probes = make_probes(cfg, data)
    main_probe = cfg.probe
    if cfg.optimizer == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(stack.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    else:
        optimizer = torch.optim.Adam(stack.parameters(), cfg.lr)
    streams = [data.batches(seed, cfg.batch) for seed in seeds]
    k = len(seeds)
    curves: list[list[dict[str, Any]]] = [[] for _ in seeds]
    cpu = wall = 0.0
    losses: list[np.ndarray] = []
    fired_at: list[int | None] = [None] * k
    began = time.perf_counter()
    for step in range(cfg.steps + 1):
        out_of_time = bool(cfg.max_seconds) and time.perf_counter() - began > cfg.max_seconds
        if step % cfg.eval_every == 0 or step == cfg.steps or out_of_time:
            recent = np.mean(losses[-cfg.eval_every :], axis=0) if losses else [None] * k
            for i, ev in enumerate(evaluate(stack, probes)):
                row: dict[str, Any] = {"step": step, "cpu_s": round(cpu / k, 3), "wall_s": round(wall / k, 3),
                                       "train_loss": None if recent[i] is None else float(recent[i])}  # fmt: skip
                for name, result in ev.items():
                    s = result["scores"]
                    row[name] = {"source_loss": result["source_loss"], "copy_loss": result["copy_loss"],
                                 "induction_l1": float(s["induction"][-1].max()),
                                 "prev_token_l0": float(s["prev_token"][0].max()),
                                 "duplicate_l0": float(s["duplicate"][0].max()),
                                 "induction": s["induction"].round(4).tolist(),
                                 "prev_token": s["prev_token"].round(4).tolist()}  # fmt: skip
                curves[i].append(row)
                main = row[main_probe]
                fired = (
                    main["induction_l1"] >= cfg.induction_threshold and main["copy_loss"] < 0.5 * main["source_loss"]
                )
                if fired and fired_at[i] is None:
                    fired_at[i] = len(curves[i])
            if step % (cfg.eval_every * 8) == 0 or step == cfg.steps:
                line = " ".join(f"{c[-1][main_probe]['induction_l1']:.2f}" for c in curves)
                loss = " ".join(f"{c[-1]['train_loss'] or 0:.2f}" for c in curves)
                log(f"  step {step:5d} cpu {cpu / k:6.1f}s/seed loss {loss} ind L1 {line}")
            done = all(f is not None and len(curves[0]) - f >= cfg.stop_after for f in fired_at)
            if step == cfg.steps or out_of_time or (cfg.stop_after and done):
                break
        start, start_wall = time.process_time(), time.perf_counter()
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) if cfg.warmup else cfg.lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        tokens = torch.from_numpy(np.stack([next_batch(step) for next_batch in streams])).to(device)
        loss = stack.loss(tokens)
        optimizer.zero_grad(set_to_none=True)
        stack.backward(loss)
        optimizer.step()
        step_loss = loss.detach().cpu().numpy()
        cpu += time.process_time() - start
        wall += time.perf_counter() - start_wall
        losses.append(step_loss)
        if not np.isfinite(step_loss).all():
            log(f"  diverged at step {step}")
            break
    if weights_dir is not None:
        weights_dir.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds):
            torch.save(stack.seed_state_dict(i), weights_dir / f"{cfg.tag or 'run'}_s{seed}.pt")
    return [summarise(cfg, seed, curve) for seed, curve in zip(seeds, curves)]


def summarise(cfg: RunConfig, seed: int, curve: list[dict[str, Any]]) -> dict[str, Any]:
    main = cfg.probe
    ind = first_step(curve, lambda r: r[main]["induction_l1"] >= cfg.induction_threshold)
    icl = first_step(curve, lambda r: r[main]["copy_loss"] < 0.5 * r[main]["source_loss"])
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
        "initial_induction_l1": round(curve[0][main]["induction_l1"], 4),
        "best_induction_l1": round(max(r[main]["induction_l1"] for r in curve), 4),
        "best_prev_token_l0": round(max(r[main]["prev_token_l0"] for r in curve), 4),
    }
    for name in (k for k in last if isinstance(last[k], dict)):
        p = last[name]
        row |= {f"final_{name}_induction_l1": round(p["induction_l1"], 4),
                f"final_{name}_prev_token_l0": round(p["prev_token_l0"], 4),
                f"final_{name}_source_loss": round(p["source_loss"], 4),
                f"final_{name}_copy_loss": round(p["copy_loss"], 4)}  # fmt: skip
    return {"row": row, "curve": curve}


# ---------------------------------------------------------------- head stability
def packed_patterns(patterns: torch.Tensor, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(blocks [layer, seed * head, entry] float32, offsets [prompt + 1]) of patterns [layer, seed, prompt, head, q, k]:
    each prompt's lower triangle of its own length, packed as headstab.activations.packing does."""
    from headstab.activations.packing import lower_triangle_index, lower_triangle_offsets

    n_layers, n_seeds, _, n_heads, n_pos, _ = patterns.shape
    flat = patterns.permute(2, 0, 1, 3, 4, 5).reshape(
        -1, n_layers, n_seeds * n_heads, n_pos * n_pos
    )  # [prompt, layer, row, q k]
    pieces = [flat[p][..., torch.from_numpy(lower_triangle_index(int(n), n_pos).copy())] for p, n in enumerate(lengths)]
    return torch.cat(pieces, dim=-1).float().numpy(), lower_triangle_offsets(lengths)


def induction_head_stability(
    states: Sequence[dict[str, torch.Tensor]], spec: ArchitectureSpec, probe: Probe, null_seed: int = 0
) -> list[dict[str, Any]]:
    """Per refit: its best layer-1 induction head on `probe`, that head's stability across the other refits and its
    prompt-permutation null (headstab.similarity.prompt_groups, one group of every prompt; headstab.stability Eq. 3-4).

    states: the refits' TransformerBridge state dicts (at least 2).
    """
    from headstab.similarity.prompt_groups import layer_group_similarity, null_partners
    from headstab.stability import head_stability_table, pair_stability_table

    stack = StackedTransformer(spec, len(states))
    for i, state in enumerate(states):
        stack.load_seed_state_dict(i, state)
    _, patterns = stack_patterns(stack, torch.from_numpy(probe.tokens))
    scores = [head_scores(patterns[:, i], probe)["induction"] for i in range(len(states))]
    blocks, offsets = packed_patterns(patterns, probe.lengths)
    partners = null_partners(probe.lengths, null_seed)
    groups = [np.arange(len(probe.lengths))]
    kinds = zip(
        *(layer_group_similarity(block, offsets, probe.lengths, groups, partners, len(states)) for block in blocks)
    )
    refits = list(range(len(states)))
    stability = {}
    for kind, per_layer in zip(("observed", "null"), kinds):
        similarity = np.stack([layer[0] for layer in per_layer], axis=2)  # [seed_a, seed_b, layer, head_a, head_b]
        table = head_stability_table(pair_stability_table(similarity, refits, probe_name(probe)))
        stability[kind] = table.set_index(["anchor_seed", "layer", "head"])["stability"]
    rows = []
    for i, score in enumerate(scores):
        layer = len(score) - 1
        head = int(score[layer].argmax())
        rows.append({"refit": i, "layer": layer, "head": head, "induction": float(score[layer, head]),
                     "stability": float(stability["observed"][i, layer, head]),
                     "null": float(stability["null"][i, layer, head])})  # fmt: skip
    return rows


def probe_name(probe: Probe) -> str:
    return f"probe_{len(probe.lengths)}"


# ---------------------------------------------------------------- files
def save(result: dict, out: Path) -> None:
    row = result["row"]
    (out / "curves").mkdir(parents=True, exist_ok=True)
    name = f"{row['tag'] or 'run'}_{int(time.time() * 1e3)}_s{row['seed']}.json"
    (out / "curves" / name).write_text(json.dumps(result))
    path = out / "runs.csv"
    with locked(out / "runs.lock"):  # the runs of a sweep append from parallel processes
        rows = read_rows(path)
        rows.append({k: ("" if v is None else v) for k, v in row.items()})
        fields = list(dict.fromkeys(k for r in rows for k in r))
        tmp = path.with_suffix(f".tmp{os.getpid()}")
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
        if k["data"] == "tokens":
            return f"tokens zipf {k['zipf']}, repeat {k['repeat_fraction']}, span {k['span']}, gap {k['gap']}"
        return k["data"]

    header = ("tag", "data", "vocab", "seq", "batch", "lr", "warm-up", "optimizer", "probe", "formed",
              "steps to induction >= 0.3", "tokens (median)", "CPU s (median)", "CPU ms/step", "final ind L1",
              "max prev L0", "final probe loss source/copy")  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for tag, group in groups.items():
        k = group[0]
        probe = k.get("probe") or "random"
        steps = [int(r["step_induction"]) if r["step_induction"] else None for r in group]
        done = [s for s in steps if s is not None]
        shown = ", ".join(str(s) if s is not None else f">{r['steps_run']}" for s, r in zip(steps, group))
        opt = k["optimizer"] + (f" wd {k['weight_decay']}" if float(k["weight_decay"] or 0) else "")
        cells = (
            tag, data(k), k["vocab"], k["seq_len"], k["batch"], k["lr"], k["warmup"], opt, probe,
            f"{len(done)}/{len(group)}", shown,
            med([s * int(k["batch"]) * int(k["seq_len"]) for s in done], ",.0f"),
            med([float(r["cpu_s_induction"]) for r in group if r.get("cpu_s_induction")], ".0f"),
            med([1e3 * float(r["cpu_s_per_step"]) for r in group if r.get("cpu_s_per_step")], ".0f"),
            med([float(r[f"final_{probe}_induction_l1"]) for r in group], ".2f"),
            med([float(r["best_prev_token_l0"]) for r in group], ".2f"),
            f"{med([float(r[f'final_{probe}_source_loss']) for r in group], '.2f')}/"
            f"{med([float(r[f'final_{probe}_copy_loss']) for r in group], '.2f')}",
        )  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def plot(out: Path, tags: Sequence[str]) -> Path:
    """Induction score of layer 1 and copy loss on the detectors' probe against step, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for path in sorted((out / "curves").glob("*.json")):
        result = json.loads(path.read_text())
        if tags and result["row"]["tag"] not in tags:
            continue
        probe = result["row"]["probe"]
        steps = [r["step"] for r in result["curve"]]
        label = f"{result['row']['tag']} s{result['row']['seed']}"
        ax1.plot(steps, [r[probe]["induction_l1"] for r in result["curve"]], label=label, lw=1)
        ax2.plot(steps, [r[probe]["copy_loss"] for r in result["curve"]], label=label, lw=1)
    ax1.axhline(0.3, color="grey", ls=":")
    ax1.set(xlabel="step", ylabel="best induction score, layer 1")
    ax2.set(xlabel="step", ylabel="probe loss on copied tokens (nats)")
    ax1.legend(fontsize=6)
    fig.tight_layout()
    target = out / f"curves_{'_'.join(tags) or 'all'}.png"
    fig.savefig(target, dpi=120)
    plt.close(fig)
    return target


# ---------------------------------------------------------------- sweeps
# The curves of benchmarks/README.md: tag -> RunConfig fields over the base of its data kind.
TOKENS = {"data": "tokens", "vocab": 64, "steps": 8000, "eval_every": 50, "stop_after": 3}
TEXT = {"data": "text", "vocab": 300, "doc_repeats": 8, "lr": 3e-3, "steps": 6000, "eval_every": 50,
        "stop_after": 3, "probe": "spans"}  # fmt: skip
SWEEPS: dict[str, dict[str, dict[str, Any]]] = {
    "curves": {
        "sanity_1layer_v512": TOKENS | {"n_layers": 1, "vocab": 512, "steps": 500, "stop_after": 0},
        "halves_v64": TOKENS | {"data": "halves"},
        "text_v300_r8": TEXT,
        "text_v300_r3": TEXT | {"doc_repeats": 3},
        "text_v300_r0": TEXT | {"doc_repeats": 0},
        "text_v300_r8_lr1e-3": TEXT | {"lr": 1e-3},
        "text_v300_r8_b32": TEXT | {"batch": 32},
        "text_v512_r8": TEXT | {"vocab": 512},
        "text_v1024_r8": TEXT | {"vocab": 1024},
        "text_v300_r8_seq96": TEXT | {"seq_len": 96},
        **{f"tokens_v{v}": TOKENS | {"vocab": v} for v in (16, 32, 64, 128, 256, 512)},
        **{f"tokens_v64_b{b}": TOKENS | {"batch": b} for b in (8, 32, 64)},
        "tokens_v64_lr3e-4": TOKENS | {"lr": 3e-4},
        "tokens_v64_lr3e-3": TOKENS | {"lr": 3e-3},
        "tokens_v64_lr1e-2_w100": TOKENS | {"lr": 1e-2, "warmup": 100},
        "tokens_v64_lr3e-3_w300": TOKENS | {"lr": 3e-3, "warmup": 300},
        "tokens_v64_r0.25": TOKENS | {"repeat_fraction": 0.25},
        "tokens_v64_r0.75": TOKENS | {"repeat_fraction": 0.75},
        "tokens_v64_span4-12_gap0-8": TOKENS | {"span": (4, 12), "gap": (0, 8)},
        "tokens_v64_seq64": TOKENS | {"seq_len": 64},
        "tokens_v64_seq256": TOKENS | {"seq_len": 256},
        "tokens_v64_adamw0.1": TOKENS | {"optimizer": "adamw", "weight_decay": 0.1},
        "tokens_v256_zipf1": TOKENS | {"vocab": 256, "zipf": 1.0},
    },
    # the recommended setting (benchmarks/README.md), Adam and AdamW: `--seeds` picks the refits
    "recommended": {
        "rec_adam": TOKENS | {"lr": 3e-3, "warmup": 300, "steps": 5500},
        "rec_adamw": TOKENS | {"lr": 3e-3, "warmup": 300, "steps": 5500, "optimizer": "adamw", "weight_decay": 0.1},
    },
}


def run_flags(settings: dict[str, Any]) -> list[str]:
    """Command-line flags of RunConfig settings."""
    flags = []
    for name, value in settings.items():
        flags.append("--" + name.replace("_", "-"))
        flags.extend(str(v) for v in (value if isinstance(value, tuple) else (value,)))
    return flags


def sweep(name: str, out: Path, jobs: int, seeds: Sequence[int], extra: Sequence[str], deadline_s: float) -> None:
    """Run every setting of SWEEPS[name] as one stack of `seeds`, `jobs` processes at a time, logs in out/logs.

    Settings not started within `deadline_s` seconds are skipped (and listed).
    """
    import subprocess

    (out / "logs").mkdir(parents=True, exist_ok=True)
    began, pending, running = time.perf_counter(), list(SWEEPS[name].items()), []
    while pending or running:
        running = [p for p in running if p.poll() is None]
        while pending and len(running) < jobs and time.perf_counter() - began < deadline_s:
            tag, settings = pending.pop(0)
            command = [sys.executable, __file__, "run", "--tag", tag, "--out", str(out), "--seeds",
                       *map(str, seeds), *run_flags(settings), *extra]  # fmt: skip
            with open(out / "logs" / f"{tag}.log", "w") as log:
                running.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        if pending and time.perf_counter() - began >= deadline_s:
            print(f"deadline: skipped {', '.join(tag for tag, _ in pending)}", flush=True)
            pending = []
        time.sleep(1)


def stability_report(args: argparse.Namespace) -> str:
    """Markdown table: the saved refits' (--weights) best layer-1 induction heads on span prompts, their stability and
    null; then the same for as many untrained refits (seeds 1, 2, ...) of the same architecture."""
    if len(args.weights) < 2:
        raise ValueError("stability needs --weights of at least 2 saved refits")
    from headstab.training.initial_weights import initial_state_dict

    spec = demo_spec(args.vocab, args.seq_len, args.n_layers, args.n_ctx)
    data = SyntheticStream(args.data, args.vocab, args.seq_len, args.zipf)
    probe = span_prompts(data.heldout_documents(n_documents=120), 2 * PROBE_PROMPTS)
    trained = [torch.load(path, weights_only=True) for path in args.weights]
    untrained = [initial_state_dict(spec, seed) for seed in range(1, len(trained) + 1)]
    lines = ["| refit | best layer-1 induction head | induction score | head stability | null | stability - null |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for names, states in (
        (args.weights, trained),
        ([f"untrained seed {i + 1}" for i in range(len(trained))], untrained),
    ):
        for name, row in zip(names, induction_head_stability(states, spec, probe)):
            lines.append(f"| {Path(name).stem} | L{row['layer']}H{row['head']} | {row['induction']:.3f} | "
                         f"{row['stability']:.3f} | {row['null']:.3f} | {row['stability'] - row['null']:+.3f} |")  # fmt: skip
    return "\n".join(lines)


# ---------------------------------------------------------------- command line
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "report", "sweep", "stability"])
    parser.add_argument("--sweep", default="curves", choices=sorted(SWEEPS), help="sweep: the settings to run")
    parser.add_argument("--jobs", type=int, default=2, help="sweep: processes at a time")
    parser.add_argument("--deadline", type=float, default=math.inf, help="sweep: start no run after these seconds")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny stacks of every data kind, seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4], help="trained together as one stack")
    parser.add_argument("--tags", nargs="*", default=[], help="report: only these tags")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save-weights", action="store_true", help="keep each refit's final weights in out/weights")
    parser.add_argument("--weights", type=Path, nargs="*", default=[], help="stability: saved refits (.pt)")
    defaults = RunConfig()
    for field in dataclasses.fields(RunConfig):
        value = getattr(defaults, field.name)
        flag = "--" + field.name.replace("_", "-")
        if isinstance(value, tuple):
            parser.add_argument(flag, type=int, nargs=2, default=value)
        elif value is None:
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
    if args.command == "stability":
        print(stability_report(args))
        return []
    if args.command == "sweep":
        extra = ["--device", args.device, "--threads", str(args.threads)]
        extra += ["--max-seconds", str(args.max_seconds)] if args.max_seconds else []
        sweep(args.sweep, args.out, args.jobs, args.seeds, extra, args.deadline)
        return []
    cfg = RunConfig(**{f.name: (tuple(v) if isinstance(v, list) else v) for f in dataclasses.fields(RunConfig)
                       for v in [getattr(args, f.name)]})  # fmt: skip
    configs = [cfg]
    if args.quick:
        quick = dict(steps=4, eval_every=2, vocab=300, batch=2, seq_len=32, stop_after=0)
        configs = [
            dataclasses.replace(cfg, **quick, tag="quick_tokens"),
            dataclasses.replace(cfg, **quick, tag="quick_halves", data="halves"),
            dataclasses.replace(cfg, **quick | {"vocab": 5}, tag="quick_markov", data="markov"),
            dataclasses.replace(
                cfg, **quick, tag="quick_text", data="text", n_documents=30, doc_repeats=2, probe="spans"
            ),  # fmt: skip
        ]
        args.seeds = args.seeds[:2]
    results = []
    for run_cfg in configs:
        data = make_data(run_cfg, args.out)
        print(f"{run_cfg.tag or 'run'} seeds {args.seeds}: {run_cfg}", flush=True)
        weights = args.out / "weights" if args.save_weights else None
        for result in train_stack(run_cfg, args.seeds, data, weights_dir=weights):
            save(result, args.out)
            r = result["row"]
            print(f"  seed {r['seed']}: induction >= {run_cfg.induction_threshold} at step {r['step_induction']} "
                  f"({r['cpu_s_induction']} CPU s), icl at {r['step_icl']}, {r['cpu_s_per_step'] * 1e3:.1f} ms/step, "
                  f"best ind {r['best_induction_l1']} prev {r['best_prev_token_l0']}", flush=True)  # fmt: skip
            results.append(result)
    return results


if __name__ == "__main__":
    main()
