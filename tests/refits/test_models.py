"""Models: seeded construction, the listings' parameter counts, init scale, weights round trip."""

from __future__ import annotations

import math
import shlex

import pytest
import torch

from headstab.fileio import read_json, sha256_file, write_json_atomic
from headstab.plan.config import REPO_ROOT, architecture_spec, load_yaml
from headstab.plan.spec import ConfigError, spec_from_dict
from headstab.refits.models import (
    CheckpointError,
    build_model,
    count_weight_matrix_params,
    load_trained_model,
    load_verified_state_dict,
    rebuild_command,
    resolve_device,
    save_weights,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def paper_config():
    # Read without validation: the test needs only the architecture registry, not the prompt files.
    return load_yaml(REPO_ROOT / "config" / "config.yaml")


def _weights_equal(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_seed_gives_bit_identical_initial_weights(tiny_spec):
    spec = tiny_spec()
    assert _weights_equal(build_model(spec, seed=3), build_model(spec, seed=3))


def test_different_seeds_give_different_initial_weights(tiny_spec):
    spec = tiny_spec()
    one, two = build_model(spec, seed=1).state_dict(), build_model(spec, seed=2).state_dict()
    for name in ("embed.weight", "blocks.0.attn.q.weight", "blocks.1.mlp.out.weight", "unembed.weight"):
        assert not torch.equal(one[name], two[name]), name


@pytest.mark.parametrize(
    "arch, listed",
    [("l8_h8", 25_165_824), ("l8_h8_attn", 8_388_608), ("gpt2", 84_934_656)],
)
def test_weight_matrix_params_match_the_listings(paper_config, arch, listed):
    spec = architecture_spec(paper_config, arch)
    model = build_model(spec, seed=1)
    assert count_weight_matrix_params(model) == listed == spec.n_params


def test_paper_init_scale_on_every_weight_matrix(paper_config):
    spec = architecture_spec(paper_config, "l2_h8")
    model = build_model(spec, seed=1)
    assert model.cfg.initializer_range == 0.8 / math.sqrt(512)
    assert round(model.cfg.initializer_range, 7) == 0.0353553  # the value the listings print
    state = model.state_dict()
    # The paper's HookedTransformer drew every matrix, output projections included, from N(0, 0.0353553).
    for name in (
        "blocks.0.attn.q.weight",
        "blocks.1.attn.o.weight",
        "blocks.0.mlp.in.weight",
        "blocks.1.mlp.out.weight",
    ):
        assert state[name].std().item() == pytest.approx(0.0353553, rel=0.01), name
        assert state[name].mean().abs().item() < 1e-3
    assert torch.count_nonzero(state["blocks.0.attn.q.bias"]) == 0
    assert torch.equal(state["blocks.0.ln1.weight"], torch.ones(512))


def test_tl_native_init_is_residual_scaled_without_the_legacy_fix(tiny_spec):
    spec = tiny_spec(n_layers=2, d_model=64, d_head=16, n_heads=4, d_mlp=256)
    native = build_model(spec, seed=1, legacy_gpt2_init=False).state_dict()
    paper = build_model(spec, seed=1).state_dict()
    scale = math.sqrt(2 * spec.n_layers)
    assert torch.allclose(paper["blocks.0.attn.o.weight"], native["blocks.0.attn.o.weight"] * scale)
    assert torch.equal(paper["blocks.0.attn.q.weight"], native["blocks.0.attn.q.weight"])


def test_embeddings_are_untied(tiny_spec):
    model = build_model(tiny_spec(), seed=1)
    assert model.cfg.tie_word_embeddings is False
    embed, unembed = model.state_dict()["embed.weight"], model.state_dict()["unembed.weight"]
    assert embed.shape == unembed.shape
    assert embed.data_ptr() != unembed.data_ptr()
    assert not torch.equal(embed, unembed)
    # A gradient step on the loss moves both, independently.
    tokens = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(0))
    model(tokens, return_type="loss").backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert len(grads) == len(list(model.parameters()))


def test_weights_round_trip_through_final_pt(tiny_spec, tmp_path):
    spec = tiny_spec()
    model = build_model(spec, seed=5)
    save_weights(model, tmp_path / "final.pt")
    loaded = load_trained_model(spec, tmp_path / "final.pt")
    assert _weights_equal(model, loaded)
    assert not loaded.training
    tokens = torch.arange(16).reshape(1, 16) % 32
    assert torch.equal(model(tokens), loaded(tokens))
    assert not list(tmp_path.glob(".*.tmp"))


def test_missing_weights_name_the_file_and_the_rule(tiny_spec, tmp_path):
    path = tmp_path / "seed1" / "final.pt"
    with pytest.raises(CheckpointError, match=r"final\.pt does not exist.*rule train"):
        load_trained_model(tiny_spec(), path)


def test_corrupt_weights_name_the_file_and_the_rule(tiny_spec, tmp_path):
    path = tmp_path / "final.pt"
    save_weights(build_model(tiny_spec(), seed=1), path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=rf"{path}.*unreadable.*rule train"):
        load_trained_model(tiny_spec(), path)


def test_weights_of_another_architecture_are_refused(tiny_spec, tmp_path):
    path = tmp_path / "final.pt"
    save_weights(build_model(tiny_spec(d_model=32, d_head=16), seed=1), path)
    with pytest.raises(CheckpointError, match=r"does not fit architecture 'tiny'.*has shape.*rule train"):
        load_trained_model(tiny_spec(), path)
    save_weights(build_model(tiny_spec(attn_only=True), seed=1), path)
    with pytest.raises(CheckpointError, match=r"missing \['blocks\.0\.ln2\.bias'"):
        load_trained_model(tiny_spec(), path)


def saved_with_meta(spec, directory):
    """final.pt of a fresh model and a meta.json recording its sha256, as training leaves them."""
    path = directory / "final.pt"
    save_weights(build_model(spec, seed=1), path)
    write_json_atomic(directory / "meta.json", {"seed": 1, "final_weights_sha256": sha256_file(path)})
    return path


def flip_bit_in_the_middle(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # the middle of a final.pt is tensor data
    path.write_bytes(bytes(data))


def test_verified_state_dict_is_the_saved_tensors(tiny_spec, tmp_path):
    spec = tiny_spec()
    path = saved_with_meta(spec, tmp_path)
    state = load_verified_state_dict(path)
    saved = build_model(spec, seed=1).state_dict()
    assert state.keys() == saved.keys() and all(torch.equal(state[key], saved[key]) for key in saved)


def test_a_flipped_bit_in_final_pt_fails_its_recorded_sha256(tiny_spec, tmp_path):
    spec = tiny_spec()
    path = saved_with_meta(spec, tmp_path)
    expected = sha256_file(path)
    flip_bit_in_the_middle(path)
    found = sha256_file(path)
    for load in (load_verified_state_dict, lambda weights: load_trained_model(spec, weights)):
        with pytest.raises(CheckpointError) as error:
            load(path)
        message = str(error.value)
        assert f"weights file {path} is corrupt: its sha256 is {found}" in message
        assert f"{tmp_path / 'meta.json'} records {expected}" in message
        assert f"`{rebuild_command(path)}`" in message
    # What the check prevents: torch loads the flipped file without complaint, one value changed.
    state = torch.load(path, weights_only=True)
    saved = build_model(spec, seed=1).state_dict()
    assert sum(int(torch.count_nonzero(state[key] != saved[key])) for key in saved) == 1


@pytest.mark.parametrize(
    "where, record, rule",
    [
        ("l2_h4/checkpoints/seed1", {}, "train"),
        ("l2_h8/checkpoints/seed1", {"source": {"kind": "published", "repo_id": "x/y"}}, "fetch_published"),
        ("l2_h8/checkpoints/seed1", {"source": {"kind": "published_local", "path": "/p"}}, "fetch_published"),
        ("pythia/checkpoints/seed1", {"source": {"kind": "hub_family"}, "loader": "transformers"}, "fetch_family"),
        ("grid/checkpoints/seed1-1", {"reused_paper_refit": {"architecture": "l2_h4"}}, "reuse_paper_refit"),
        ("l2_h4/snapshots/step0/weights/seed1", {"source": "initialisation"}, "init_weights"),
        ("l2_h4/snapshots/step36/weights/seed1", {"source": "training"}, "snapshot_weights"),
    ],
)
def test_corrupt_weights_name_the_rule_that_wrote_them(tiny_spec, tmp_path, where, record, rule):
    path = saved_with_meta(tiny_spec(), tmp_path)
    target = tmp_path / "results" / where / "final.pt"
    target.parent.mkdir(parents=True)
    path.rename(target)
    write_json_atomic(target.parent / "meta.json", {**read_json(tmp_path / "meta.json"), **record})
    flip_bit_in_the_middle(target)
    with pytest.raises(CheckpointError) as error:
        load_verified_state_dict(target)
    assert str(error.value).endswith(
        f"delete it and rebuild it with `{rebuild_command(target)}` (rule {rule}; add --configfile for a "
        "non-default configuration)"
    )


def test_weights_without_a_recorded_sha256_load_unverified(tiny_spec, tmp_path):
    spec = tiny_spec()
    path = tmp_path / "final.pt"
    save_weights(build_model(spec, seed=1), path)
    write_json_atomic(tmp_path / "meta.json", {"seed": 1})  # an older record without the digest
    assert load_verified_state_dict(path).keys() == build_model(spec, seed=1).state_dict().keys()


def test_rebuild_command_quotes_a_path_with_spaces(tiny_spec, tmp_path):
    path = tmp_path / "results dir" / "l2 h4" / "checkpoints" / "seed1" / "final.pt"
    with pytest.raises(CheckpointError) as error:
        load_trained_model(tiny_spec(), path)
    words = shlex.split(str(error.value).split("`")[1])
    assert words == ["rm", "-f", str(path), "&&", "snakemake", "--cores", "all", str(path)]


def test_device_auto_falls_back_to_cpu_and_an_absent_cuda_names_the_key(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"'compute\.device' is 'cuda:0' but no CUDA device is visible"):
        resolve_device("cuda:0")


def test_spec_from_dict_inverts_to_dict(tiny_spec):
    spec = tiny_spec()
    assert spec_from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("processing", [(), ("center_writing_weights", "fold_value_biases")])
def test_the_initial_model_is_what_loading_the_init_weights_file_gives(tiny_spec, tmp_path, processing):
    """The head types' held-out initialisations are built in memory: the same bits, the same weight processing,
    as rule init_weights' file loaded the way every refit is."""
    from headstab.refits.models import initial_model
    from headstab.training.snapshots import write_init_weights

    spec = tiny_spec()
    write_init_weights(spec, 7, tmp_path / "final.pt")
    loaded = load_trained_model(spec, tmp_path / "final.pt", weight_processing=processing).state_dict()
    built = initial_model(spec, 7, weight_processing=processing)
    assert not built.training
    state = built.state_dict()
    assert state.keys() == loaded.keys() and all(torch.equal(state[k], loaded[k]) for k in state)
    other = initial_model(spec, 8, weight_processing=processing).state_dict()
    assert not torch.equal(other["embed.weight"], state["embed.weight"])
