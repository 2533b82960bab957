"""Tiny random GPT-2 and GPT-NeoX families (3 seeds each), built with transformers and save_pretrained, and a
tiny byte-level BPE tokenizer saved beside each: stand-ins for PolyPythias and Stanford CRFM's GPT-2 runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

N_CTX = 128
SEEDS = (1, 2, 3)
TEXTS = [
    "The old lighthouse keeper climbed the stairs each evening and lit the lamp.",
    "Alice: Did you bring the maps? Bob: I left them in the car near the station.",
    "Step 3: Stir the flour into the butter until the mixture is smooth and thick.",
    "def add(a, b):\n    return a + b\n\nprint(add(12, 7))",
    "12 + 7 = 19, 15 + 4 = 19, 10 + 9 = 19, and 20 - 1 = 19 as well.",
    "Meeting notes, Tuesday: the budget review was moved to Friday afternoon.",
]


def build_tokenizer(directory: Path) -> Any:
    """A byte-level BPE tokenizer (headstab's own trainer) saved with save_pretrained into `directory`."""
    from headstab.refits.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(TEXTS * 20, vocab_size=300, out_dir=directory)


def hf_model(kind: str, seed: int, vocab_size: int) -> Any:
    """A randomly initialised tiny causal LM: kind 'gpt2' (GPT2LMHeadModel) or 'neox' (GPTNeoXForCausalLM)."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    special = {"bos_token_id": 0, "eos_token_id": 0}
    if kind == "gpt2":
        config = GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=vocab_size, n_positions=N_CTX, **special)
        model = GPT2LMHeadModel(config)
    else:
        config = GPTNeoXConfig(
            num_hidden_layers=2,
            num_attention_heads=2,
            hidden_size=16,
            intermediate_size=64,
            vocab_size=vocab_size,
            max_position_embeddings=N_CTX,
            **special,
        )
        model = GPTNeoXForCausalLM(config)
    with torch.no_grad():  # larger weights than the default init, so heads attend differently
        for name, tensor in model.named_parameters():
            if name.endswith("weight") and tensor.ndim == 2:
                tensor.normal_(0.0, 0.5)
    return model.eval()


def write_family(root: Path, kind: str, seeds: tuple[int, ...] = SEEDS) -> dict[int, Path]:
    """{seed: directory} of a family saved under `root`/`kind`/seed{s}/ (model and tokenizer)."""
    tokenizer = build_tokenizer(root / "tokenizer")
    directories = {}
    for seed in seeds:
        directory = root / kind / f"seed{seed}"
        hf_model(kind, seed, len(tokenizer)).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        directories[seed] = directory
    return directories


def hf_layer0_patterns(directory: Path, tokens: Any) -> Any:
    """Layer 0's attention patterns [batch, head, query, key] of the saved model, run directly with transformers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.as_tensor(tokens), output_attentions=True)
    return out.attentions[0].numpy()


def hf_mlp_post(directory: Path, tokens: Any) -> Any:
    """Every layer's MLP activation of the saved model, run directly with transformers: the output of `act`, which
    GPT2MLP applies to `c_fc` and GPTNeoXMLP to `dense_h_to_4h` (TransformerLens's `mlp.hook_post`), float32
    [layer, batch, pos, d_mlp]."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=False).eval()
    base = model.base_model
    blocks = base.h if hasattr(base, "h") else base.layers  # GPT2Model.h, GPTNeoXModel.layers
    captured = {}
    handles = [
        block.mlp.act.register_forward_hook(lambda _module, _args, out, layer=layer: captured.__setitem__(layer, out))
        for layer, block in enumerate(blocks)
    ]
    try:
        with torch.no_grad():
            model(torch.as_tensor(tokens))
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack([captured[layer] for layer in range(len(blocks))]).numpy()


# ---------------------------------------------------------------- families with revisions along training
def train_run(kind: str, init_seed: int, data_seed: int, vocab_size: int, start: Any = None) -> dict[str, Any]:
    """One run's state dicts {"step0", "step1", "step4", "final"}: the initialisation of `init_seed` (or the
    state `start`), then Adam (lr 1e-3) on random tokens of `data_seed`, kept after 1, 4 and 8 steps."""
    model = hf_model(kind, init_seed, vocab_size)
    if start is not None:
        model.load_state_dict(start)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1000 + data_seed)
    states = {"step0": _copy(model.state_dict())}
    for step in range(1, 9):
        tokens = torch.randint(0, vocab_size, (4, 16), generator=generator)
        model(tokens, labels=tokens).loss.backward()  # eval mode: no dropout, so a run is one function of its seeds
        optimizer.step()
        optimizer.zero_grad()
        if step in (1, 4, 8):
            states["final" if step == 8 else f"step{step}"] = _copy(model.state_dict())
    return states


def _copy(state: Any) -> dict[str, Any]:
    return {name: tensor.detach().clone() for name, tensor in state.items()}


def write_revisions(root: Path, kind: str, runs: dict[int, dict[str, Any]], tokenizer: Any) -> str:
    """Save every run's revisions as `root`/`kind`/seed{s}/{revision}/ (save_pretrained) and return the path
    template of the family's models, `.../seed{seed}/{revision}`."""
    for seed, states in runs.items():
        for revision, state in states.items():
            model = hf_model(kind, 0, len(tokenizer))
            model.load_state_dict(state)
            model.save_pretrained(root / kind / f"seed{seed}" / revision)
            tokenizer.save_pretrained(root / kind / f"seed{seed}" / revision)
    return str(root / kind / "seed{seed}" / "{revision}")


def audit_config(tmp_path: Path, families: dict[str, dict[str, Any]], seeds: tuple[int, ...] = SEEDS) -> Path:
    """tests/config/tiny.yaml with hub families from local directories: {name: its entry (models, audit, ...)},
    every one in the tokenizer saved under `tmp_path`/models/tokenizer. Returns the config file."""
    import yaml

    from headstab.plan.config import load_yaml

    repo = Path(__file__).resolve().parents[2]
    config = load_yaml(repo / "tests/config/tiny.yaml")
    config["results_dir"] = str(tmp_path / "results")
    config["run"] = {"architectures": list(families), "seeds": None}
    config["tokenizers"] = {"family_bpe": {"source": "local", "path": str(tmp_path / "models/tokenizer")}}
    config["corpora"] = {"family_heldout": {**config["corpora"]["tiny_heldout"], "tokenizer": "family_bpe"}}
    config["architecture_defaults"].update(tokenizer="family_bpe", corpus="family_heldout", seeds=list(seeds))
    config["architectures"] = {name: {"source": "hub_family", **entry} for name, entry in families.items()}
    config["analysis"].update(heldout_corpus="family_heldout")
    path = tmp_path / "families.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
