"""What the workflow plans from a config beyond paths (headstab.plan.jobs), on the demo and paper configs."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from headstab.plan.config import architecture_spec, load_config, selected_architectures
from headstab.plan.jobs import (
    HELDOUT_HUB_DATASET,
    activation_sets,
    analysis_spec,
    cache_options,
    corpus_job_entry,
    corpus_source_inputs,
    extra_resid_hooks,
    heldout_shards,
    job_spec,
    names_regex,
    names_with_source,
    network_targets,
    neuron_heldout_dataset,
    neuron_heldout_shards,
    paper_twin_diagonal,
    paper_twins,
    prompt_checks,
    tokenizer_jobs,
    tokenizer_training_entry,
    trained_refits,
)
from headstab.plan.layout import Layout

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo():
    return load_config(REPO / "config/demo.yaml")


@pytest.fixture(scope="module")
def paper():
    return load_config(REPO / "config/config.yaml")


def specs_of(config):
    return {arch: architecture_spec(config, arch) for arch in selected_architectures(config)}


def test_names_regex_matches_exactly_the_names_and_nothing_when_empty():
    pattern = names_regex(["l2_h8", "l2_h8_wd", "l2"])
    assert [bool(re.fullmatch(pattern, name)) for name in ("l2_h8", "l2_h8_wd", "l2", "l2_h", "l2_h8_w")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert re.fullmatch(names_regex([]), "") is None and re.fullmatch(names_regex([]), "x") is None


def test_job_spec_drops_only_the_seeds(demo):
    spec = architecture_spec(demo, "l4_h8")
    values = job_spec(spec)
    assert "seeds" not in values and {**values, "seeds": list(spec.seeds)} == spec.to_dict()


def test_analysis_spec_runs_every_refit_with_the_analysis_activation_and_keeps_the_rest(demo):
    spec = architecture_spec(demo, "l4_h8")
    assert analysis_spec(spec, None) == spec  # null: the function the refit was trained with
    gelu_new = analysis_spec(spec, "gelu_new")
    assert gelu_new.act_fn == "gelu_new" and {**gelu_new.to_dict(), "act_fn": spec.act_fn} == spec.to_dict()


def test_a_synthetic_corpus_is_read_from_its_generated_text_without_its_runtime_estimate(demo):
    layout = Layout(demo)
    name = names_with_source(demo["corpora"], "synthetic")[0]
    entry = corpus_job_entry(
        {**demo, "corpora": {name: {**demo["corpora"][name], "expected_tokens": 123}}}, layout, name
    )
    assert entry["path"] == layout.synthetic_text(name) == corpus_source_inputs(demo, layout, name)[0]
    assert "expected_tokens" not in entry


def test_tokenizer_training_ignores_the_keys_that_only_shape_the_shards(demo):
    layout = Layout(demo)
    name = names_with_source(demo["tokenizers"], "train")[0]
    before = tokenizer_training_entry(demo, layout, name)
    changed = copy.deepcopy(demo)
    corpus = changed["tokenizers"][name]["corpus"]
    changed["corpora"][corpus].update(n_tokens=7, n_shards=9)
    assert tokenizer_training_entry(changed, layout, name) == before
    changed["corpora"][corpus]["seed"] = demo["corpora"][corpus]["seed"] + 1
    assert tokenizer_training_entry(changed, layout, name) != before


def test_tokenizer_jobs_name_each_tokenizers_files_and_what_a_trained_one_trains_on(demo, paper):
    for config in (demo, paper):
        layout, table = Layout(config), tokenizer_jobs(config, Layout(config))
        assert table.keys() == config["tokenizers"].keys()
        for name, entry in config["tokenizers"].items():
            jobs = table[name]
            assert (jobs["dir"], jobs["target"]) == (layout.tokenizer_dir(name), layout.tokenizer_target(name))
            if entry["source"] == "train":
                assert jobs["training_inputs"] == corpus_source_inputs(config, layout, entry["corpus"])
                assert jobs["training_corpus"] == tokenizer_training_entry(config, layout, name)
            else:
                assert (jobs["training_inputs"], jobs["training_corpus"]) == ([], {})
    assert tokenizer_jobs(demo, Layout(demo))["demo_bpe"]["training_inputs"] == [
        Layout(demo).synthetic_text("synthetic")
    ]
    assert any(entry["source"] != "train" for entry in paper["tokenizers"].values())


def test_hub_corpora_have_no_input_files_and_local_ones_their_path(paper):
    layout = Layout(paper)
    for name, entry in paper["corpora"].items():
        expected = [entry["path"]] if entry["source"] == "local" else []
        if entry["source"] != "synthetic":
            assert corpus_source_inputs(paper, layout, name) == expected


def test_one_prompt_check_per_tokenizer_and_context(paper):
    checks = prompt_checks(specs_of(paper))
    assert sum(len(archs) for by_ctx in checks.values() for archs in by_ctx.values()) == 26 + 1  # and l2_h8_grid
    for tokenizer, by_ctx in checks.items():
        for n_ctx, archs in by_ctx.items():
            assert all(
                (architecture_spec(paper, a).tokenizer, str(architecture_spec(paper, a).n_ctx)) == (tokenizer, n_ctx)
                for a in archs
            )


def test_cache_options_change_only_when_another_residual_hook_is_stored(demo):
    every_set = {**demo, "cache": {**demo["cache"], "activation_sets": "all"}}
    before = {
        key: value
        for key, value in demo["cache"].items()
        if key not in ("activation_sets", "pattern_compression_level")
    }
    assert extra_resid_hooks(demo) == [] and cache_options(every_set) == before
    other = {**every_set, "analysis": {**demo["analysis"], "cka_hook": "hook_resid_pre"}}
    assert extra_resid_hooks(other) == ["hook_resid_pre"]
    assert cache_options(other) == {**before, "extra_resid_hooks": ["hook_resid_pre"]}
    # a snapshot's patterns-only cache: the same options as before activation_sets existed
    assert cache_options(demo, patterns_only=True) == {**before, "patterns_only": True}
    step0 = cache_options(demo, residual_sets=["primary"])  # a step-0 snapshot's, for residual CKA's chance level
    assert step0 == {**before, "residual_only": True, "activation_sets": ["primary"]}


def test_cache_options_name_pattern_compression_only_when_it_is_set(demo):
    # unset (the schema's default): the params of caches written before the key existed stay as they were
    assert demo["cache"]["pattern_compression_level"] is None
    assert "pattern_compression_level" not in cache_options(demo)
    compressed = {**demo, "cache": {**demo["cache"], "pattern_compression_level": 1}}
    assert cache_options(compressed)["pattern_compression_level"] == 1
    assert cache_options(compressed, patterns_only=True)["pattern_compression_level"] == 1


def test_cache_options_store_activations_for_the_sets_the_analyses_read(demo):
    assert demo["cache"]["activation_sets"] is None  # the schema's default
    assert activation_sets(demo) == ["primary"] and cache_options(demo)["activation_sets"] == ["primary"]
    other_primary = {**demo, "analysis": {**demo["analysis"], "promptset": "len50"}}
    assert cache_options(other_primary)["activation_sets"] == ["len50"]
    listed = {**demo, "cache": {**demo["cache"], "activation_sets": ["len20"]}}
    assert activation_sets(listed) == ["len20", "primary"]  # the analyses' set is always added
    assert "activation_sets" not in cache_options({**demo, "cache": {**demo["cache"], "activation_sets": "all"}})


def test_heldout_shards_are_wikitext_per_tokenizer_or_the_configured_corpus(paper, demo):
    paper_specs, layout = specs_of(paper), Layout(paper)
    shards = heldout_shards(paper, paper_specs, layout)
    assert shards["gpt2"] == [layout.heldout_shard(HELDOUT_HUB_DATASET, paper_specs["gpt2"].tokenizer)]
    demo_specs = specs_of(demo)
    corpus = demo["analysis"]["heldout_corpus"]
    assert set(map(tuple, heldout_shards(demo, demo_specs, Layout(demo)).values())) == {
        tuple(Layout(demo).corpus_shards(corpus))
    }


def test_a_heldout_corpus_in_another_tokenizer_is_refused_naming_the_key(demo):
    changed = copy.deepcopy(demo)
    corpus = changed["analysis"]["heldout_corpus"]
    changed["corpora"][corpus]["tokenizer"] = "another_bpe"
    with pytest.raises(ValueError, match=r"analysis\.heldout_corpus.*another_bpe"):
        heldout_shards(changed, specs_of(demo), Layout(demo))


def test_network_targets_are_the_hub_downloads_only(paper, demo):
    assert network_targets(demo, specs_of(demo), Layout(demo)) == []
    layout, specs = Layout(paper), specs_of(paper)
    targets = network_targets(paper, specs, layout)
    tokenizers = sorted({spec.tokenizer for spec in specs.values()})
    assert [
        layout.tokenizer_target(name) for name in tokenizers if paper["tokenizers"][name]["source"] == "hub"
    ] == targets[: len([t for t in tokenizers if paper["tokenizers"][t]["source"] == "hub"])]
    wikitext = [layout.heldout_shard(HELDOUT_HUB_DATASET, name) for name in tokenizers]
    c4 = [layout.heldout_shard("allenai--c4_en_validation_first10000000", name) for name in tokenizers]
    assert wikitext + c4 == targets[-2 * len(tokenizers) :]  # every tokenizer of the paper has MLP architectures
    assert len(targets) == len(set(targets))
    offline_neurons = {**paper, "neurons": {**paper["neurons"], "heldout": None}}
    assert network_targets(offline_neurons, specs, layout) == targets[: -len(tokenizers)]


def test_the_neuron_heldout_text_is_one_shard_per_tokenizer_of_the_architectures_with_mlps(paper, demo):
    layout, specs = Layout(paper), specs_of(paper)
    with_mlps = {arch: spec for arch, spec in specs.items() if not spec.attn_only}
    shards = neuron_heldout_shards(paper, with_mlps, layout)
    dataset = "allenai--c4_en_validation_first10000000"
    assert shards == {arch: [layout.heldout_shard(dataset, spec.tokenizer)] for arch, spec in with_mlps.items()}
    assert sorted({shard for arch_shards in shards.values() for shard in arch_shards}) == [
        layout.heldout_shard(dataset, "gpt2"),
        layout.heldout_shard(dataset, "neox_digits"),
    ]
    assert neuron_heldout_shards(paper, with_mlps, layout)["gpt2"] != heldout_shards(paper, with_mlps, layout)["gpt2"]
    # null: the analysis held-out text, as the demo and the tests keep
    assert demo["neurons"]["heldout"] is None
    demo_specs = specs_of(demo)
    assert neuron_heldout_shards(demo, demo_specs, Layout(demo)) == heldout_shards(demo, demo_specs, Layout(demo))
    assert neuron_heldout_dataset(demo) is None


def test_the_neuron_heldout_directory_names_the_split_and_the_budget(paper):
    """Another dataset, split or budget is another shard and so new neuron statistics: nothing stale is read."""

    def named(**changes):
        source = {**paper["neurons"]["heldout"], **changes.pop("source", {})}
        return neuron_heldout_dataset({"neurons": {**paper["neurons"], "heldout": source, **changes}})

    assert named() == "allenai--c4_en_validation_first10000000"
    assert named(tokens=1000) == "allenai--c4_en_validation_first1000"
    assert named(source={"split": "train"}) == "allenai--c4_en_train_first10000000"
    assert named(source={"name": "Skylion007/openwebtext", "config_name": None, "split": "train"}) == (
        "Skylion007--openwebtext_train_first10000000"
    )
    assert named(source={"config_name": "en.noblocklist"}) == "allenai--c4_en-noblocklist_validation_first10000000"
    assert re.fullmatch(names_regex([named()]), named()) and not re.fullmatch(names_regex([named()]), "wikitext")


def test_wildcard_lookup_returns_the_jobs_entry_and_names_a_missing_one():
    from types import SimpleNamespace

    from headstab.plan.jobs import WildcardLookup

    table = {"l2_h8": {"train_inputs": {"tokenizer": "tok/meta.json"}, "seeds": [1, 2]}, "l4_h8": {"seeds": [3]}}
    assert WildcardLookup(table, "arch", "train_inputs", "tokenizer")(SimpleNamespace(arch="l2_h8")) == "tok/meta.json"
    assert WildcardLookup(table, "arch", "seeds")(SimpleNamespace(arch="l4_h8")) == [3]
    assert WildcardLookup(table, "arch")(SimpleNamespace(arch="l4_h8")) is table["l4_h8"]
    with pytest.raises(KeyError, match="l8_h16"):
        WildcardLookup(table, "arch", "seeds")(SimpleNamespace(arch="l8_h16"))


def test_library_digest_changes_with_the_code_it_covers_and_names_a_missing_module(tmp_path):
    from headstab.plan.jobs import library_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "other.py").write_text("y = 1\n")
    before = library_digest("pkg", root=tmp_path)
    (tmp_path / "other.py").write_text("y = 2\n")
    assert library_digest("pkg", root=tmp_path) == before  # not covered
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert library_digest("pkg", root=tmp_path) != before
    assert library_digest("statistics") == library_digest("statistics")
    with pytest.raises(FileNotFoundError, match="no module or subpackage 'nothing'"):
        library_digest("nothing", root=tmp_path)


def test_a_seed_grid_reuses_the_paper_architecture_whose_settings_it_shares(demo):
    assert paper_twins(specs_of(demo), ["l2_h8_grid"]) == {"l2_h8_grid": "l2_h8"}
    assert paper_twin_diagonal(specs_of(demo), {"l2_h8_grid": "l2_h8"}) == ["1-1", "2-2", "3-3"]


def test_only_diagonal_refits_whose_seed_the_twin_has_are_reused(tiny_spec):
    specs = {
        "paper": tiny_spec(name="paper", seeds=(1, 2)),
        "grid": tiny_spec(name="grid", seeds=("1-1", "1-2", "2-2", "3-3", "1-1-ulp")),
    }
    assert paper_twin_diagonal(specs, {"grid": "paper"}) == ["1-1", "2-2"]  # a one-ulp twin trains
    assert paper_twin_diagonal(specs, {}) == []


@pytest.mark.parametrize(
    "differs", [{"lr": 0.001}, {"seq_len": 8}, {"attn_only": True}, {"tokenizer": "other"}, {"snapshot_steps": (4,)}]
)
def test_a_seed_grid_whose_training_model_data_or_tokenizer_differs_has_no_twin(tiny_spec, differs):
    specs = {"paper": tiny_spec(name="paper", seeds=(1, 2)), "grid": tiny_spec(name="grid", seeds=("1-1", "1-2"))}
    assert paper_twins(specs, ["grid"]) == {"grid": "paper"}
    specs["grid"] = tiny_spec(name="grid", seeds=("1-1", "1-2"), **differs)
    assert paper_twins(specs, ["grid"]) == {}


def test_trained_refits_leave_out_only_the_grid_diagonal_its_twin_trains(demo):
    specs = {arch: architecture_spec(demo, arch) for arch in selected_architectures(demo)}
    trained = trained_refits(specs, paper_twins(specs, ["l2_h8_grid"]))
    assert trained["l2_h8"] == [1, 2, 3, 4]
    # 1-1, 2-2, 3-3 are l2_h8's 1, 2, 3; their one-ulp twins train
    assert trained["l2_h8_grid"] == ["1-2", "1-3", "2-1", "2-3", "3-1", "3-2", "1-1-ulp", "2-2-ulp", "3-3-ulp"]
    assert trained_refits(specs, {})["l2_h8_grid"] == list(specs["l2_h8_grid"].seeds)
