"""The paper's published refits: TransformerLens 2 state dicts converted to our checkpoints, fetched
from a local mirror or through the real huggingface_hub code path, and refused with a clear message."""

from __future__ import annotations

import hashlib
import json
import pickle
import re

import numpy as np
import pytest
import torch
from helpers.published_refits import code_payloads, numpy_layer0_patterns, tl2_state_dict, write_mirror

from headstab.activations.capture import collect_activations
from headstab.plan.sources import PUBLISHED_REPO_ID, CheckpointSource, checkpoint_source, default_refit_file
from headstab.plan.spec import ConfigError
from headstab.refits.models import build_model, load_trained_model
from headstab.refits.published import (
    PublishedRefitError,
    convert_published_refit,
    convert_tl2_state_dict,
    download_published_refit,
    load_tl2_state_dict,
)

TOKENS = np.array([[0, 5, 9, 3, 17, 2, 30, 11, 6, 1], [0, 4, 4, 8, 1, 19, 7, 25, 3, 12]])


@pytest.mark.parametrize("attn_only", [False, True])
def test_converted_refit_gives_the_layer0_patterns_of_the_raw_tl2_tensors(tiny_spec, attn_only):
    spec = tiny_spec(attn_only=attn_only, n_heads=2, d_head=8)
    state = tl2_state_dict(spec, seed=7)
    model = build_model(spec, seed=0, legacy_gpt2_init=False)
    model.load_state_dict(convert_tl2_state_dict(state, spec))
    model.eval()
    patterns = collect_activations(model, TOKENS)["hook_pattern"][0]  # [batch, head, query, key]
    np.testing.assert_allclose(patterns, numpy_layer0_patterns(state, TOKENS), atol=1e-5)
    assert np.abs(patterns[:, 0] - patterns[:, 1]).max() > 0.1  # the heads differ: a wrong head order would show


def test_conversion_renames_and_transposes_without_changing_values(tiny_spec):
    spec = tiny_spec()
    state = tl2_state_dict(spec, seed=1)
    ours = convert_tl2_state_dict(state, spec)
    assert set(ours) == set(build_model(spec, seed=0).state_dict())
    w_o = state["blocks.1.attn.W_O"]  # [head, d_head, d_model]
    assert torch.equal(ours["blocks.1.attn.o.weight"][:, spec.d_head + 3], w_o[1, 3])
    assert torch.equal(ours["blocks.1.attn.v.weight"][spec.d_head + 2], state["blocks.1.attn.W_V"][1, :, 2])
    assert torch.equal(ours["blocks.0.mlp.out.weight"], state["blocks.0.mlp.W_out"].T)
    assert torch.equal(ours["unembed.weight"], state["unembed.W_U"].T)


def test_a_local_mirror_refit_becomes_a_verified_checkpoint_with_its_record(tiny_spec, tmp_path):
    spec = tiny_spec(name="l2_h2")
    mirror = write_mirror(tmp_path / "chkpts", spec, seeds=(3,), wrap=True)
    config = {
        "architecture_defaults": {},
        "architectures": {"l2_h2": {"source": "published_local", "path": str(mirror)}},
    }
    source = checkpoint_source(config, "l2_h2")
    original = source.local_file(spec, 3)
    assert original.endswith("chkpts/l2_h2/causal_attn_l2_h2_seed3_epoch1_c4_gelu/final.pt")
    meta = convert_published_refit(original, spec, 3, source, tmp_path / "out")
    assert meta["original_sha256"] == hashlib.sha256(open(original, "rb").read()).hexdigest()
    assert meta["identity"] == f"{mirror}:l2_h2/causal_attn_l2_h2_seed3_epoch1_c4_gelu/final.pt"
    assert json.loads((tmp_path / "out/meta.json").read_text()) == meta
    model = load_trained_model(spec, tmp_path / "out/final.pt")  # checks final_weights_sha256
    assert torch.equal(model.state_dict()["embed.weight"], tl2_state_dict(spec, 3)["embed.W_E"])


def serve(files: dict[str, bytes], requests: list[str]):
    """An httpx transport that answers the hub's HEAD and GET for `files` ({path in repo: bytes})."""
    import httpx

    def handle(request):
        requests.append(f"{request.method} {request.url.path}")
        name = request.url.path.split("/resolve/main/", 1)[-1]
        if name not in files:
            return httpx.Response(404, headers={"X-Error-Code": "EntryNotFound"})
        body = files[name]
        headers = {
            "ETag": f'"{hashlib.sha256(body).hexdigest()}"',
            "X-Repo-Commit": "0" * 40,
            "Content-Length": str(len(body)),
        }
        return httpx.Response(200, headers=headers, content=b"" if request.method == "HEAD" else body)

    return httpx.MockTransport(handle)


def test_the_hub_code_path_downloads_and_converts_with_only_the_transport_replaced(tiny_spec, tmp_path, monkeypatch):
    """Everything of huggingface_hub runs (URL, metadata, download, local_dir); only the HTTP transport
    (the network boundary) is replaced by one that serves a local file."""
    import httpx
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    spec = tiny_spec(name="l2_h2", attn_only=True)
    mirror = write_mirror(tmp_path / "served", spec, seeds=(2,))
    name = "l2_h2/causal_attn_only_l2_h2_seed2_epoch1_c4_gelu/final.pt"
    requests: list[str] = []
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    _http.set_client_factory(lambda: httpx.Client(transport=serve({name: (mirror / name).read_bytes()}, requests)))
    try:
        source = CheckpointSource("published", PUBLISHED_REPO_ID, "main")
        downloaded = download_published_refit(source, spec, 2, tmp_path / "download")
        meta = convert_published_refit(downloaded, spec, 2, source, tmp_path / "out")
    finally:
        _http.set_client_factory(_http.default_client_factory)
    assert f"GET /{PUBLISHED_REPO_ID}/resolve/main/{name}" in requests
    assert downloaded == tmp_path / "download" / name
    assert meta["identity"] == f"{PUBLISHED_REPO_ID}@main:{name}"
    converted = torch.load(tmp_path / "out/final.pt", weights_only=True)
    assert torch.equal(converted["blocks.1.attn.q.bias"], tl2_state_dict(spec, 2)["blocks.1.attn.b_Q"].reshape(-1))


class NotATensor:
    pass


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([torch.zeros(3)], "holds a list, not a state dict"),
        ({"model_state_dict": {"embed.W_E": NotATensor()}}, "needs code to be unpickled.*NotATensor"),
        (b"not a torch file", "is unreadable"),
    ],
)
def test_a_file_that_is_no_state_dict_is_refused_naming_it(tmp_path, content, message):
    path = tmp_path / "final.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    with pytest.raises(PublishedRefitError, match=message) as error:
        load_tl2_state_dict(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
@pytest.mark.parametrize("function", ["system", "call", "exec"])
def test_a_published_refit_that_calls_code_is_refused_naming_what_it_calls_and_nothing_runs(
    tiny_spec, tmp_path, function, writer
):
    spec, marker = tiny_spec(), tmp_path / "MARKER"
    path = write_mirror(tmp_path / "mirror", spec, (1,)) / default_refit_file(spec).format(arch=spec.name, seed=1)
    payload = code_payloads(marker)[function]
    if writer == "torch.save":  # a zip archive whose data.pkl holds the payload beside real tensors
        torch.save({**tl2_state_dict(spec, 1), "extra": payload}, path)
    else:  # a bare pickle: torch.load's legacy path
        path.write_bytes(pickle.dumps(payload, protocol=2))
    source = CheckpointSource("published_local", path=str(tmp_path / "mirror"))
    with pytest.raises(PublishedRefitError) as refused:
        convert_published_refit(path, spec, 1, source, tmp_path / "out")
    message = str(refused.value)
    assert message.startswith(f"published refit {path} cannot be loaded with torch.load(weights_only=True)")
    assert re.search(rf"needs code to be unpickled \(it refers to (\S+\.)?{function}\)", message), message
    assert "delete it and fetch it again" not in message
    assert not marker.exists() and not (tmp_path / "out/final.pt").exists()


def test_wrong_shapes_and_missing_tensors_are_refused_naming_the_file_and_the_tensor(tiny_spec, tmp_path):
    spec = tiny_spec()
    state = tl2_state_dict(spec, seed=1)
    with pytest.raises(PublishedRefitError, match=r"blocks.0.attn.W_Q has shape \(2, 16, 4\).*needs \(2, 16, 8\)"):
        convert_tl2_state_dict({**state, "blocks.0.attn.W_Q": torch.zeros(2, 16, 4)}, spec, tmp_path / "x.pt")
    del state["blocks.1.mlp.W_in"]
    with pytest.raises(PublishedRefitError, match=r"x.pt does not fit .*missing \['blocks.1.mlp.W_in'\]"):
        convert_tl2_state_dict(state, spec, tmp_path / "x.pt")


def test_source_keys_are_checked(tmp_path):
    defaults = {"source": "published_local", "path": str(tmp_path / "nowhere")}
    with pytest.raises(ConfigError, match=r"architectures.a.path.*is not a directory"):
        checkpoint_source({"architecture_defaults": defaults, "architectures": {"a": {}}}, "a")
    bad = {"source": "published", "refit_file": "{arch}/{layers}/final.pt"}
    with pytest.raises(ConfigError, match=r"refit_file.*unknown field\(s\) \['layers'\]"):
        checkpoint_source({"architecture_defaults": {}, "architectures": {"a": bad}}, "a")
    source = checkpoint_source({"architecture_defaults": {}, "architectures": {"a": {"source": "published"}}}, "a")
    assert (source.repo_id, source.revision, source.trained) == (PUBLISHED_REPO_ID, "main", False)
    assert checkpoint_source({"architecture_defaults": {}, "architectures": {"a": {}}}, "a").trained
