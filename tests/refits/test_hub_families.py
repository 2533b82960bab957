"""Seeded families from the hub: config entries, dimensions from config.json, fetch checks, and the bridge
that the analyses load (layer-0 patterns as transformers computes them, weight norms from its state dict)."""

from __future__ import annotations

import codecs
import json
import re

import numpy as np
import pytest
from helpers.hub_family_models import build_tokenizer, hf_layer0_patterns, hf_model, write_family
from helpers.published_refits import code_payloads

from headstab.plan.config import architecture_spec
from headstab.plan.hub_families import FamilyModel, FamilySource, family_source, hf_dimensions, source_from_dict
from headstab.plan.spec import ConfigError
from headstab.refits.hub_models import FamilyModelError, fetch_family_refit

TOKENS = np.array([[0, 5, 9, 3, 17, 2, 30, 11, 6, 1], [0, 4, 4, 8, 1, 19, 7, 25, 3, 12]])


def family_config(models, **entry):
    defaults = {
        "act_fn": "gelu",
        "normalization_type": "LN",
        "positional_embedding_type": "standard",
        "init_mode": "gpt2",
        "attn_only": False,
        "tokenizer": "tok",
        "corpus": "c",
        "optimizer": "adam",
        "weight_decay": 0.0,
        "lr": 1e-3,
        "batch_size": 1,
        "seq_len": None,
        "epochs": 1,
        "n_tokens": None,
        "checkpoint_every": 1,
        "log_every": 1,
        "seeds": [1, 2, 3],
        "d_model": 512,  # defaults that a local model's config.json must override
        "n_ctx": 1024,
    }
    return {
        "run": {"seeds": None},
        "architecture_defaults": defaults,
        "architectures": {"fam": {"source": "hub_family", "models": models, **entry}},
        "analysis": {"weight_processing": []},
    }


def test_dimensions_come_from_gpt2_and_gpt_neox_configs():
    gpt2 = hf_model("gpt2", 1, 300).config.to_dict()
    neox = hf_model("neox", 1, 300).config.to_dict()
    assert hf_dimensions(gpt2) == {
        **dict(n_layers=2, n_heads=2, d_model=16, d_head=8, d_mlp=64, n_ctx=128, d_vocab=300),
        **dict(attn_only=False, positional_embedding_type="standard", act_fn="gelu_new"),
    }
    assert hf_dimensions(neox)["positional_embedding_type"] == "rotary"
    assert (hf_dimensions(neox)["d_mlp"], hf_dimensions(neox)["act_fn"]) == (64, "gelu")


def test_a_local_family_reads_its_dimensions_over_the_defaults(tmp_path):
    write_family(tmp_path, "neox")
    config = family_config({"path": str(tmp_path / "neox/seed{seed}")})
    spec = architecture_spec(config, "fam")
    assert (spec.d_model, spec.n_ctx, spec.d_head, spec.positional_embedding_type) == (16, 128, 8, "rotary")
    source = family_source(config, "fam", spec.seeds)
    assert source.model(3).path == str(tmp_path / "neox/seed3") and not source.needs_network
    assert source_from_dict(source.to_dict(seeds=[2])) == FamilySource(((2, source.model(2)),))


def test_hub_ids_take_a_revision_and_need_their_dimensions_in_the_config():
    models = {1: {"id": "org/a"}, 2: {"id": "org/b", "revision": "step10"}, 3: {"id": "org/c"}}
    config = family_config(models, revision="step1000")
    with pytest.raises(ConfigError, match="set n_layers, n_heads, d_head, d_mlp, d_vocab in the entry"):
        architecture_spec(config, "fam")
    source = family_source(config, "fam", (1, 2, 3))
    assert source.needs_network and source.model(1).identity == "org/a@step1000"
    assert source.model(2).revision == "step10"
    with pytest.raises(ConfigError, match=r"no model for seed\(s\) \[4\]"):
        family_source(config, "fam", (1, 4))


def test_family_entries_refuse_weight_processing_snapshots_and_missing_directories(tmp_path):
    config = family_config({"path": str(tmp_path / "nowhere{seed}")})
    with pytest.raises(ConfigError, match="is not a directory"):
        family_source(config, "fam", (1,))
    config = family_config({"id": "org/m{seed}"})
    config["analysis"]["weight_processing"] = ["fold_value_biases"]
    with pytest.raises(ConfigError, match="analysed with its weights as published"):
        family_source(config, "fam", (1,))
    config = family_config({"id": "org/m{seed}"}, snapshot_steps=[0])
    with pytest.raises(ConfigError, match="snapshot_steps"):
        family_source(config, "fam", (1,))


@pytest.mark.parametrize("kind", ["gpt2", "neox"])
def test_a_fetched_family_refit_loads_as_a_bridge_with_the_hf_patterns_and_weight_norms(tmp_path, kind, one_thread):
    from headstab.activations.capture import collect_activations
    from headstab.refits.models import load_trained_model
    from headstab.sections.weight_norms import layer_weight_norms, trained_state

    directories = write_family(tmp_path / "models", kind, seeds=(1, 2))
    config = family_config({"path": str(tmp_path / f"models/{kind}/seed{{seed}}")}, seeds=[1, 2])
    spec = architecture_spec(config, "fam")
    source = family_source(config, "fam", spec.seeds)
    meta = fetch_family_refit(source, spec, 2, tmp_path / "models/tokenizer", tmp_path / "out")
    assert meta["loader"] == "transformers" and meta["identity"] == str(directories[2])
    assert json.loads((tmp_path / "out/meta.json").read_text())["final_weights_sha256"] == meta["final_weights_sha256"]
    model = load_trained_model(spec, tmp_path / "out/final.pt")  # checks final_weights_sha256
    patterns = collect_activations(model, TOKENS)["hook_pattern"][0]  # [batch, head, query, key]
    np.testing.assert_allclose(patterns, hf_layer0_patterns(directories[2], TOKENS), atol=1e-6)
    assert np.abs(patterns[:, 0] - patterns[:, 1]).max() > 0.05  # the heads differ: a wrong head order would show
    norms = layer_weight_norms(trained_state(spec, tmp_path / "out/final.pt", ()), 2, 2, 8)
    assert set(norms["matrix"]) == {"W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "ln1_w", "ln2_w"}
    assert np.isfinite(norms["frobenius_norm"]).all() and (norms["frobenius_norm"] > 0).all()


def test_fetch_refuses_a_model_whose_tokenizer_or_dimensions_differ(tmp_path):
    write_family(tmp_path / "models", "gpt2", seeds=(1,))
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1, 2])
    config["architectures"]["fam"]["models"] = {"1": {"path": str(tmp_path / "models/gpt2/seed1")}}
    config["architectures"]["fam"]["seeds"] = [1]
    spec = architecture_spec({**config, "run": {"seeds": None}}, "fam")
    source = family_source(config, "fam", (1,))
    other = build_tokenizer(tmp_path / "other")  # trained on the same text: same vocabulary
    other.add_tokens(["<extra>"])
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(FamilyModelError, match="differs from the configured tokenizer"):
        fetch_family_refit(source, spec, 1, tmp_path / "other", tmp_path / "out")
    wrong = architecture_spec(
        {**config, "architectures": {"fam": {**config["architectures"]["fam"], "n_heads": 4, "d_head": 4}}}, "fam"
    )
    with pytest.raises(FamilyModelError, match=r"n_heads 2 \(entry: 4\)"):
        fetch_family_refit(source, wrong, 1, tmp_path / "models/tokenizer", tmp_path / "out")


def test_optimizer_pairs_name_architectures_of_the_config():
    from pathlib import Path

    from headstab.plan.config import load_yaml, validate_config

    config = load_yaml(Path(__file__).resolve().parents[2] / "config/hub_families.yaml")
    config["analysis"]["optimizer_pairs"] = {"pythia-160m": "pythia-16m"}
    with pytest.raises(ConfigError, match="analysis.optimizer_pairs': unknown architecture 'pythia-16m'"):
        validate_config(config)


def plant_remote_code(directory, marker):
    """Make `directory` a model of its own code: config.json's auto_map names classes of evil.py, which writes
    `marker` when imported (what transformers does with trust_remote_code, or when a user types y)."""
    (directory / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import GPT2Config, GPT2LMHeadModel\n"
        "class EvilConfig(GPT2Config):\n    model_type = 'evil'\n"
        "class EvilModel(GPT2LMHeadModel):\n    config_class = EvilConfig\n"
    )
    config = json.loads((directory / "config.json").read_text())
    config.update(
        model_type="evil", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    )
    (directory / "config.json").write_text(json.dumps(config))


def test_a_local_family_with_its_own_code_is_refused_at_parse_time_naming_the_file_and_key(tmp_path):
    directories = write_family(tmp_path / "models", "gpt2", seeds=(1, 2))
    plant_remote_code(directories[2], tmp_path / "ran")
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1, 2])
    with pytest.raises(ConfigError) as refused:
        family_source(config, "fam", (1, 2))
    message = str(refused.value)
    assert f"{directories[2] / 'config.json'} has key 'auto_map'" in message
    assert "config key 'architectures.fam.models.path' (seed 2)" in message and "trust_remote_code=False" in message
    assert not (tmp_path / "ran").exists()


def test_fetch_never_runs_a_models_own_code_even_when_the_user_answers_yes(tmp_path, monkeypatch):
    directories = write_family(tmp_path / "models", "gpt2", seeds=(1,))
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1, 2])
    spec = architecture_spec(config, "fam")
    plant_remote_code(directories[1], tmp_path / "ran")  # after planning, as a hub download is first seen at fetch
    monkeypatch.setattr("builtins.input", lambda prompt="": "y")  # transformers' [y/N] question, answered y
    source = FamilySource(((1, FamilyModel(path=str(directories[1]))),))
    with pytest.raises(FamilyModelError, match=f"{re.escape(str(directories[1] / 'config.json'))} has key 'auto_map'"):
        fetch_family_refit(source, spec, 1, tmp_path / "models/tokenizer", tmp_path / "out")
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "out/final.pt").exists()


def test_fetch_refuses_pickled_weights_that_call_code_naming_the_file_and_nothing_runs(tmp_path):
    import torch

    directories = write_family(tmp_path / "models", "gpt2", seeds=(1,))
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1, 2])
    spec = architecture_spec(config, "fam")
    weights = directories[1] / "pytorch_model.bin"
    state = hf_model("gpt2", 1, spec.d_vocab).state_dict()
    torch.save({**state, "extra": code_payloads(tmp_path / "MARKER")["system"]}, weights)
    (directories[1] / "model.safetensors").unlink()  # transformers then reads the .bin
    source = FamilySource(((1, FamilyModel(path=str(directories[1]))),))
    with pytest.raises(FamilyModelError) as refused:
        fetch_family_refit(source, spec, 1, tmp_path / "models/tokenizer", tmp_path / "out")
    message = str(refused.value)
    assert f"its weights {weights} need code to be unpickled (they refer to posix.system)" in message
    assert not (tmp_path / "MARKER").exists() and not (tmp_path / "out/final.pt").exists()


def test_a_byte_order_mark_hides_no_auto_map_at_parse_time_or_at_fetch(tmp_path, monkeypatch):
    directories = write_family(tmp_path / "models", "gpt2", seeds=(1, 2))
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1, 2])
    spec = architecture_spec(config, "fam")
    plant_remote_code(directories[2], tmp_path / "ran")
    config_file = directories[2] / "config.json"
    config_file.write_bytes(codecs.BOM_UTF8 + config_file.read_bytes())  # an editor's UTF-8 signature
    with pytest.raises(ConfigError, match=f"{re.escape(str(config_file))} has key 'auto_map'"):
        family_source(config, "fam", (1, 2))
    monkeypatch.setattr("builtins.input", lambda prompt="": "y")
    source = FamilySource(((2, FamilyModel(path=str(directories[2]))),))
    with pytest.raises(FamilyModelError, match=f"{re.escape(str(config_file))} has key 'auto_map'.*trust_remote_code"):
        fetch_family_refit(source, spec, 2, tmp_path / "models/tokenizer", tmp_path / "out")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (codecs.BOM_UTF8 + b"{}", "starts with a UTF-8 byte-order mark, which transformers cannot read; remove it"),
        (b'{"model_type": "gpt2",', "cannot be read as JSON (Expecting"),
        (b"\xff\xfe{}", "cannot be read as JSON ('utf-8' codec can't decode byte 0xff"),
        (b"[" * 100_000 + b"]" * 100_000, "cannot be read as JSON (maximum recursion depth exceeded"),
    ],
)
def test_a_model_file_that_cannot_be_checked_for_code_is_refused_naming_it_and_the_fix(tmp_path, content, reason):
    directories = write_family(tmp_path / "models", "gpt2", seeds=(1,))
    tokenizer_config = directories[1] / "tokenizer_config.json"
    tokenizer_config.write_bytes(content)
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1])
    with pytest.raises(ConfigError) as refused:
        family_source(config, "fam", (1,))
    assert str(refused.value).startswith(f"config key 'architectures.fam.models.path' (seed 1): {tokenizer_config} ")
    assert reason in str(refused.value)


def test_dimensions_from_a_config_json_that_is_no_json_object_fail_naming_it(tmp_path):
    directories = write_family(tmp_path / "models", "gpt2", seeds=(1,))
    config_file = directories[1] / "config.json"
    config = family_config({"path": str(tmp_path / "models/gpt2/seed{seed}")}, seeds=[1])
    config_file.write_bytes(codecs.BOM_UTF8 + config_file.read_bytes())
    assert architecture_spec(config, "fam").d_model == json.loads(config_file.read_bytes()[3:])["n_embd"]
    for content in ("{", "[1, 2]"):
        config_file.write_text(content)
        with pytest.raises(ConfigError) as refused:
            architecture_spec(config, "fam")
        assert str(refused.value).startswith(
            f"config key 'architectures.fam.models': {config_file} is not a JSON object"
        )


def test_a_local_family_finds_each_audited_revision_through_its_revision_field(tmp_path):
    for revision in ("step0", "final"):
        write_family(tmp_path / revision, "gpt2", seeds=(1, 2))
    template = str(tmp_path / "{revision}/gpt2/seed{seed}")
    entry = {"revision": "final", "audit": {"revisions": ["step0"], "declared_axis": "init_seed"}}
    source = family_source(family_config({"path": template}, **entry), "fam", (1, 2))
    model = source.model(2)
    assert model.directory == str(tmp_path / "final/gpt2/seed2") and model.identity == model.directory
    assert model.at("step0").directory == str(tmp_path / "step0/gpt2/seed2") and model.revision_name == "final"
    assert source.audit.revisions == ("step0",) and source.audit.declared_axis == "init_seed"
    assert source.local_inputs(2) == [str(tmp_path / "final/gpt2/seed2/config.json")]
    assert source_from_dict(source.to_dict(seeds=[2])).model(2) == model  # fetch_family's params keep the template
    with pytest.raises(
        ConfigError, match=r"audit.revisions': '.*/step1/gpt2/seed1' \(seed 1, revision step1\) is not a directory"
    ):
        family_source(family_config({"path": template}, revision="final", audit={"revisions": ["step1"]}), "fam", (1,))
    with pytest.raises(ConfigError, match=r"has a \{revision\} field; set the analysed revision"):
        family_source(family_config({"path": template}), "fam", (1,))
    plain = family_config({"path": str(tmp_path / "final/gpt2/seed{seed}")}, audit={"revisions": ["step0"]})
    with pytest.raises(ConfigError, match=r"audit.revisions': the path of seed 1, .* has no \{revision\} field"):
        family_source(plain, "fam", (1,))


def test_only_a_hub_family_has_an_audit_entry():
    from headstab.plan.sources import checkpoint_source

    config = family_config({"id": "org/m{seed}"})
    config["architectures"]["fam"] = {"source": "train", "audit": {"declared_axis": "both"}}
    with pytest.raises(ConfigError, match=r"'architectures.fam.audit': only a hub family's checkpoints are audited"):
        checkpoint_source(config, "fam")
