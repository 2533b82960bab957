"""Schema and registry: good configs pass, a new user's mistakes fail naming the key and the fix."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import yaml

from headstab.plan import config as config_module
from headstab.plan import yaml_files
from headstab.plan.config import architecture_spec, load_yaml, selected_architectures, validate_config
from headstab.plan.spec import ConfigError, spec_from_dict

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _run_from_repository_root(monkeypatch):
    # relative paths in configs (prompt files) start at the repository root, as under Snakemake
    monkeypatch.chdir(REPO)


@pytest.fixture()
def paper_config() -> dict:
    return validate_config(load_yaml(REPO / "config/config.yaml"))


@pytest.fixture()
def demo() -> dict:
    return load_yaml(REPO / "config/demo.yaml")


def test_paper_registry_has_the_26_architectures_of_table_1_and_one_seed_grid(paper_config):
    grids = [name for name, entry in paper_config["architectures"].items() if entry.get("seed_grid")]
    assert grids == ["l2_h8_grid"]
    names = [name for name in paper_config["architectures"] if name not in grids]
    assert len(names) == 26
    expected = {"gpt2", "gpt2_wd"}
    for layers in (2, 4, 8):
        for heads in (8, 16):
            base = f"l{layers}_h{heads}"
            expected |= {base, f"{base}_attn", f"{base}_wd", f"{base}_attn_wd"}
    assert set(names) == expected


def test_paper_plans_1210_refits_and_a_5_by_5_seed_grid(paper_config):
    total = sum(len(architecture_spec(paper_config, n).seeds) for n in selected_architectures(paper_config))
    assert total == 24 * 50 + 2 * 5 + 5 * 5 + 5  # and the grid's 5 one-ulp twins of its diagonal


@pytest.mark.parametrize(
    "name, n_params",
    [("l8_h8", 25_165_824), ("l8_h8_attn", 8_388_608), ("gpt2", 84_934_656)],
)
def test_listing_parameter_counts(paper_config, name, n_params):
    assert architecture_spec(paper_config, name).n_params == n_params


def test_registry_values_follow_the_listings(paper_config):
    spec = architecture_spec(paper_config, "l4_h16_attn_wd")
    assert (spec.n_layers, spec.n_heads, spec.d_model, spec.d_head, spec.d_mlp) == (4, 16, 512, 64, 2048)
    assert spec.attn_only and spec.optimizer == "adamw" and spec.weight_decay == 0.1
    assert (spec.n_ctx, spec.d_vocab, spec.act_fn, spec.batch_size, spec.lr) == (1024, 48262, "gelu", 5, 1e-4)
    assert spec.checkpoint_every == 66_285 and spec.seeds == tuple(range(1, 51))
    assert spec.initializer_range == 0.8 / math.sqrt(512)
    adam = architecture_spec(paper_config, "l2_h8")
    assert adam.optimizer == "adam" and adam.weight_decay == 0.0 and not adam.attn_only
    gpt2 = architecture_spec(paper_config, "gpt2")
    assert (gpt2.n_layers, gpt2.n_heads, gpt2.d_model, gpt2.d_mlp, gpt2.d_vocab) == (12, 12, 768, 3072, 50257)
    assert (
        gpt2.tokenizer == "gpt2" and gpt2.corpus == "openwebtext" and gpt2.lr == 5e-5 and gpt2.seeds == (1, 2, 3, 4, 5)
    )
    assert paper_config["corpora"]["c4_code_2b"]["name"] == "NeelNanda/c4-code-tokenized-2b"
    assert paper_config["tokenizers"]["neox_digits"]["name"] == "NeelNanda/gpt-neox-tokenizer-digits"


def test_demo_config_is_valid_and_selects_the_4_toy_architectures_and_the_seed_grid(demo):
    config = validate_config(demo)
    names = selected_architectures(config)
    assert names == ["l2_h8", "l2_h8_attn", "l2_h8_attn_wd", "l4_h8_attn", "l2_h8_grid"]
    # 4 x 4 paper-design refits, and the 3 x 3 init seed x data-order seed grid with its diagonal's one-ulp twins
    assert sum(len(architecture_spec(config, n).seeds) for n in names) == 16 + 9 + 3
    assert architecture_spec(config, "l2_h8_grid").seeds[-3:] == ("1-1-ulp", "2-2-ulp", "3-3-ulp")
    # defaults from the schema are filled in
    assert config["cache"]["dtype"] == "float32" and config["cache"]["prepend_bos"] is True


def test_run_seed_override_replaces_every_architectures_seeds(demo):
    demo["run"]["seeds"] = [7, 9]
    config = validate_config(demo)
    assert architecture_spec(config, "l4_h8").seeds == (7, 9)


def test_data_order_is_per_seed_by_default_and_left_out_of_the_params_until_shared(demo):
    config = validate_config(demo)
    spec = architecture_spec(config, "l2_h8")
    assert spec.data_order == "per_seed" and "data_order" not in spec.to_dict()  # old train params stay as they were
    demo["architectures"]["l2_h8"]["data_order"] = "shared"
    shared = architecture_spec(validate_config(demo), "l2_h8")
    assert shared.to_dict()["data_order"] == "shared"  # in the train params: changing it retrains
    assert spec_from_dict(shared.to_dict()) == shared and spec_from_dict(spec.to_dict()) == spec


def test_a_seed_grid_with_a_shared_data_order_fails_naming_the_key(demo):
    demo["architectures"]["l2_h8_grid"]["data_order"] = "shared"
    message = _error(demo)
    assert "architectures.l2_h8_grid.data_order" in message and "seed_grid" in message


def test_architecture_overrides_apply_to_the_architectures_a_config_has_and_skip_the_others(demo):
    demo["architecture_overrides"] = {"l2_h8": {"data_order": "shared", "lr": 0.5}, "gpt2": {"data_order": "shared"}}
    config = validate_config(demo)
    assert "gpt2" not in config["architectures"]
    spec = architecture_spec(config, "l2_h8")
    assert (spec.data_order, spec.lr) == ("shared", 0.5)  # over the entry and the defaults
    assert architecture_spec(config, "l4_h8").data_order == "per_seed"


def test_a_misspelt_override_key_names_its_path(demo):
    demo["architecture_overrides"] = {"gpt2": {"data_ordr": "shared"}}
    message = _error(demo)
    assert "architecture_overrides.gpt2" in message and "did you mean 'data_order'" in message


def test_an_analysis_activation_for_a_hub_family_fails_naming_the_key(demo):
    demo["analysis"] = {**demo.get("analysis", {}), "act_fn": "gelu_new"}
    demo["architectures"]["l2_h8"].update(source="hub_family", models={"path": "/nowhere/seed{seed}"})
    message = _error(demo)
    assert "analysis.act_fn" in message and "'l2_h8'" in message and "null" in message


def _error(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    return str(info.value)


def test_misspelt_top_level_key_names_the_key_and_suggests_the_fix(demo):
    demo["reslts_dir"] = demo.pop("results_dir")
    message = _error(demo)
    assert "'reslts_dir'" in message and "did you mean 'results_dir'" in message


def test_misspelt_architecture_key_names_its_path(demo):
    demo["architectures"]["l2_h8"]["n_layer"] = 2
    message = _error(demo)
    assert "architectures.l2_h8" in message and "did you mean 'n_layers'" in message


def test_unknown_architecture_lists_the_valid_ones(demo):
    demo["run"]["architectures"] = ["l2_h8", "l3_h8"]
    message = _error(demo)
    assert "unknown architecture 'l3_h8'" in message
    for name in demo["architectures"]:
        assert name in message


@pytest.mark.parametrize("key, value", [("n_layers", 0), ("n_heads", 0), ("n_layers", -1), ("n_heads", -4)])
def test_zero_or_negative_layer_or_head_count_fails(demo, key, value):
    demo["architectures"]["l4_h8"][key] = value
    message = _error(demo)
    assert f"architectures.l4_h8.{key}" in message and "minimum of 1" in message


def test_trained_tokenizer_larger_than_d_vocab_fails(demo):
    demo["tokenizers"]["demo_bpe"]["vocab_size"] = demo["architecture_defaults"]["d_vocab"] + 1
    message = _error(demo)
    assert "tokenizers.demo_bpe.vocab_size" in message and "d_vocab" in message


def test_missing_local_corpus_path_fails_naming_the_path(demo, tmp_path):
    missing = tmp_path / "no_such_corpus"
    demo["corpora"]["synthetic"] = {"source": "local", "path": str(missing), "tokenizer": "demo_bpe", "n_shards": 1}
    message = _error(demo)
    assert str(missing) in message and "corpora.synthetic.path" in message


def test_missing_local_tokenizer_dir_fails(demo, tmp_path):
    demo["tokenizers"]["demo_bpe"] = {"source": "local", "path": str(tmp_path / "nope")}
    assert "tokenizers.demo_bpe.path" in _error(demo)


def test_architecture_pointing_at_unknown_corpus_fails(demo):
    demo["architectures"]["l2_h8"]["corpus"] = "synthetc"
    message = _error(demo)
    assert "unknown corpus 'synthetc'" in message and "did you mean 'synthetic'" in message.lower()


def test_hub_corpus_without_name_fails(demo):
    demo["corpora"]["web"] = {"source": "hub", "tokenizer": "demo_bpe", "n_shards": 2}
    message = _error(demo)
    assert "corpora.web" in message and "'name' is a required property" in message


def test_seq_len_longer_than_context_fails(demo):
    demo["architectures"]["l2_h8"]["seq_len"] = 4096
    assert "seq_len" in _error(demo)


def test_bad_seed_range_fails(demo):
    demo["run"]["seeds"] = {"first": 5, "last": 2}
    message = _error(demo)
    assert "run.seeds" in message and "below first" in message


def test_seeds_far_apart_plan_and_a_seed_torch_cannot_take_fails_naming_the_key(demo):
    demo["run"]["seeds"] = [1, 2**40]
    config = validate_config(demo)
    assert architecture_spec(config, "l2_h8").seeds == (1, 2**40)
    demo["run"]["seeds"] = [1, 2**64]  # torch.Generator().manual_seed takes at most 2**64 - 1
    assert _error(demo).startswith(f"config key 'run.seeds': [1, {2**64}] is not valid ({2**64} is greater than")


def test_a_seed_range_of_more_refits_than_headstab_plans_fails_naming_the_key(demo):
    demo["architectures"]["l2_h8"]["seeds"] = {"first": 1, "last": 2**40}  # a tuple of 2**40 seeds: MemoryError
    message = _error(demo)
    assert message.startswith(
        f"config key 'architectures.l2_h8.seeds': {{first: 1, last: {2**40}}} asks for {2**40:,} refits, more than the "
        "10,000 headstab plans for one architecture"
    )


# NeelNanda/c4-code-tokenized-2b: 1,657,102 rows of 1,024 tokens (its dataset card); the authors train
# one epoch of it: 331,420 steps of batch 5, a checkpoint every 66,285 steps.
C4_CODE_TOKENS = 1_657_102 * 1_024


def test_paper_c4_entry_asks_for_no_more_tokens_than_the_dataset_holds(paper_config):
    c4 = paper_config["corpora"]["c4_code_2b"]
    assert c4["n_tokens"] is None or c4["n_tokens"] <= C4_CODE_TOKENS
    assert c4["expected_tokens"] == C4_CODE_TOKENS == 1_696_872_448
    spec = architecture_spec(paper_config, "l2_h8")
    assert spec.n_tokens is None and spec.epochs == 1 and spec.corpus == "c4_code_2b"
    steps = C4_CODE_TOKENS // spec.tokens_per_step
    assert steps == 331_420 and abs(spec.checkpoint_every - steps / 5) <= 1  # the authors: 66,285


def test_corpus_expected_tokens_is_validated(demo):
    demo["corpora"]["synthetic"]["expected_tokens"] = 0
    assert "corpora.synthetic.expected_tokens" in _error(demo)


def test_architecture_asking_for_more_tokens_than_its_corpus_holds_fails(demo):
    corpus = demo["architecture_defaults"]["corpus"]
    demo["corpora"][corpus]["n_tokens"] = 1000
    demo["architectures"]["l2_h8"]["n_tokens"] = 5000
    message = _error(demo)
    assert "architectures.l2_h8.n_tokens" in message and f"corpora.{corpus}.n_tokens" in message


@pytest.mark.parametrize(
    "where, key",
    [("run", "run.seeds"), ("architecture", "architectures.l2_h8.seeds"), ("defaults", "architecture_defaults.seeds")],
)
def test_a_single_seed_fails_naming_the_key_that_set_it(demo, where, key):
    if where == "run":
        demo["run"]["seeds"] = [1]
    elif where == "architecture":
        demo["architectures"]["l2_h8"]["seeds"] = {"first": 3, "last": 3}
    else:
        demo["architecture_defaults"]["seeds"] = [4]
        for entry in demo["architectures"].values():
            entry.pop("seeds", None)
    message = _error(demo)
    assert f"config key '{key}'" in message and "at least 2 seeds" in message


@pytest.mark.parametrize("results_dir", ["README.md/out", "README.md", "README.md/a/b"])
def test_results_dir_at_or_below_a_file_fails_naming_the_file(demo, results_dir):
    demo["results_dir"] = results_dir
    message = _error(demo)
    assert "config key 'results_dir'" in message and results_dir in message
    assert ("is a file" if results_dir == "README.md" else "is below README.md, which is a file") in message


@pytest.mark.parametrize("results_dir", ["../../../../../etc", "..", "results/../../elsewhere"])
def test_a_relative_results_dir_outside_the_working_directory_fails_saying_how_to_write_there(demo, results_dir):
    demo["results_dir"] = results_dir
    outside = os.path.normpath(REPO / results_dir)
    message = _error(demo)
    assert message.startswith(f"config key 'results_dir': {results_dir!r} resolves to {outside}, outside the directory")
    assert f"or, to write outside it on purpose, the absolute path (results_dir: {outside})" in message


@pytest.mark.parametrize("inside", [False, True])
def test_an_absolute_results_dir_anywhere_and_a_relative_one_inside_are_accepted(demo, tmp_path, inside):
    demo["results_dir"] = "results/../results/x" if inside else str(tmp_path / "elsewhere")
    assert validate_config(demo)["results_dir"] == demo["results_dir"]


@pytest.mark.parametrize("results_dir", ["", " ", "/", "//"])
def test_a_results_dir_that_names_no_directory_is_refused_naming_the_key_and_the_fix(demo, results_dir):
    """'' would plan every output at the file system's root (/data, /logs): the paths are '{results_dir}/data'."""
    demo["results_dir"] = results_dir
    message = _error(demo)
    assert message.startswith(f"config key 'results_dir': {results_dir!r} ")
    assert "results_dir: results/my_run" in message


def _in_directory(monkeypatch, directory: Path, config: dict) -> dict:
    """`config` run from `directory`: its prompt files named by absolute paths."""
    config["prompt_sets"] = {name: str(REPO / path) for name, path in config["prompt_sets"].items()}
    monkeypatch.chdir(directory)
    return config


def test_a_relative_results_dir_through_a_symlink_out_of_the_working_directory_is_refused(demo, tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "work/out").symlink_to(tmp_path / "elsewhere")
    demo = _in_directory(monkeypatch, tmp_path / "work", demo)
    demo["results_dir"] = "out/run"
    message = _error(demo)
    assert message.startswith(
        f"config key 'results_dir': 'out/run' resolves to {tmp_path / 'elsewhere/run'} (through a symbolic link), "
        f"outside the directory snakemake runs in ({tmp_path / 'work'})"
    )
    assert f"the absolute path (results_dir: {tmp_path / 'elsewhere/run'})" in message


def test_a_symlink_that_stays_inside_the_working_directory_is_accepted(demo, tmp_path, monkeypatch):
    (tmp_path / "disk").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "disk")
    demo = _in_directory(monkeypatch, tmp_path, demo)
    demo["results_dir"] = "out/run"
    assert validate_config(demo)["results_dir"] == "out/run"


@pytest.mark.parametrize("results_dir", ["~", "~/runs/demo"])
def test_a_results_dir_starting_with_a_tilde_is_refused_with_the_path_written_out(demo, results_dir):
    """Neither Snakemake nor Python expands '~': the outputs would land in a directory named '~' here."""
    demo["results_dir"] = results_dir
    message = _error(demo)
    assert message.startswith(f"config key 'results_dir': {results_dir!r} starts with '~', which is not expanded")
    assert f"results_dir: {os.path.expanduser(results_dir)}" in message


def test_a_results_dir_the_file_system_cannot_hold_is_refused_naming_the_key(demo):
    demo["results_dir"] = "x" * 5000  # longer than any file name (ENAMETOOLONG)
    message = _error(demo)
    assert message.startswith("config key 'results_dir': 'xxx") and "File name too long" in message
    assert len(message) < 600


def test_a_local_tokenizer_with_its_own_code_fails_naming_the_file_and_key(demo, tmp_path):
    (tmp_path / "tokenizer_config.json").write_text('{"auto_map": {"AutoTokenizer": ["evil.Tok", null]}}')
    demo["tokenizers"]["demo_bpe"] = {"source": "local", "path": str(tmp_path)}
    message = _error(demo)
    assert f"config key 'tokenizers.demo_bpe.path': {tmp_path / 'tokenizer_config.json'} has key 'auto_map'" in message
    assert "trust_remote_code=False" in message


DEMO_TEXT = (REPO / "config/demo.yaml").read_text()


@pytest.mark.parametrize(
    ("original", "doubled", "key"),
    [
        ("  lr: 2.0e-3 ", "  lr: 1.0e-3\n  lr: 2.0e-3 ", "architecture_defaults.lr"),
        ("  len: resources", "  primary: resources/prompts/x.txt\n  len: resources", "prompt_sets.primary"),
    ],
)
def test_a_key_given_twice_fails_naming_the_file_the_key_and_both_lines(tmp_path, original, doubled, key):
    path = tmp_path / "twice.yaml"
    path.write_text(DEMO_TEXT.replace(original, doubled, 1))
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f"  {key.split('.')[1]}:")]
    with pytest.raises(ConfigError) as refused:
        load_yaml(path)
    assert str(refused.value).startswith(
        f"config file {path}: key '{key}' is given twice, on line {lines[0]} and line {lines[1]};"
    )
    assert "delete one of them" in str(refused.value)


def test_a_merge_key_override_and_the_same_key_in_two_mappings_are_not_duplicates(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &base {lr: 1, seeds: [1, 2]}\nother: {<<: *base, lr: 2}\nthird: {lr: 3}\n")
    assert load_yaml(path) == {
        "base": {"lr": 1, "seeds": [1, 2]},
        "other": {"lr": 2, "seeds": [1, 2]},
        "third": {"lr": 3},
    }


def alias_bomb(levels: int, merge: bool = False) -> str:
    """A few hundred bytes of YAML whose aliases stand for 9**levels values (lists, or merge keys)."""
    if merge:
        lines = ["a0: &a0 {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
        lines += [f"a{n}: &a{n} {{<<: [{', '.join([f'*a{n - 1}'] * 9)}]}}" for n in range(1, levels)]
    else:
        lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
        lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("merge", [False, True])
def test_a_yaml_alias_bomb_is_refused_naming_the_file_and_the_limit(tmp_path, merge):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(9, merge))
    assert path.stat().st_size < 2000
    with pytest.raises(ConfigError) as refused:
        load_yaml(path)
    message = str(refused.value)
    assert message.startswith(f"config file {path}: its aliases (*name) expand to ")
    assert "more than the 100,000 a headstab YAML file may hold" in message and len(message) < 400
    assert f"at most {yaml_files.MAX_EXPANDED_NODES:,} values" in (REPO / "docs/operations.md").read_text()


def test_the_alias_limit_counts_every_value_of_the_expanded_file(tmp_path, monkeypatch):
    path = tmp_path / "aliases.yaml"
    path.write_text("a: &a [x, x]\nb: [*a, *a]\n")
    # root mapping 1 + key a 1 + [x, x] 3 + key b 1 + [*a, *a] (1 + 3 + 3) = 13
    monkeypatch.setattr(yaml_files, "MAX_EXPANDED_NODES", 13)
    assert load_yaml(path) == {"a": ["x", "x"], "b": [["x", "x"], ["x", "x"]]}
    monkeypatch.setattr(yaml_files, "MAX_EXPANDED_NODES", 12)
    with pytest.raises(ConfigError, match="expand to 13 values, more than the 12"):
        load_yaml(path)


def test_a_file_nested_too_deeply_is_refused_naming_it(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(path))} nests mappings or lists too deeply"):
        load_yaml(path)


def shared_bomb(levels: int) -> list:
    """What Snakemake's reading of `[&a0 [lol x 9], &a1 [*a0 x 9], ...]` gives: lists that share their items, so a few
    hundred bytes stand for 9**levels strings."""
    value: list = ["lol"] * 9
    for _ in range(levels - 1):
        value = [value] * 9
    return value


def test_a_shared_value_of_millions_is_refused_before_validation_naming_its_key(demo):
    """jsonschema printed such a value whole into its message (3 billion characters, minutes, 6 GB for 9**9)."""
    demo["results_dir"] = shared_bomb(7)
    expanded = 1 + sum(9**level for level in range(1, 8))  # every list and every string
    assert yaml_files.expanded_values(demo["results_dir"]) == expanded
    message = _error(demo)
    assert message.startswith(f"config key 'results_dir': its value holds {expanded:,} values once its aliases")
    assert "more than the 100,000 a headstab configuration may hold" in message


def test_the_size_check_names_the_deepest_key_past_the_limit_and_counts_the_whole_config(demo, monkeypatch):
    before = yaml_files.expanded_values(demo)
    limit = before + 500
    monkeypatch.setattr("headstab.plan.config.MAX_EXPANDED_NODES", limit)
    demo["analysis"]["weight_processing"] = ["x"] * 600  # the config past the limit, no key of it alone
    assert _error(demo).startswith(f"config key '(top level)': its value holds {before + 1 + 601:,} values")
    demo["analysis"]["weight_processing"] = ["x"] * limit
    assert _error(demo).startswith(f"config key 'analysis.weight_processing': its value holds {limit + 1:,} values")


def test_values_are_counted_wherever_they_are_shared_and_a_list_inside_itself_once():
    shared = [1, 2]
    assert yaml_files.expanded_values({"a": shared}) == 1 + 1 + 3
    assert yaml_files.expanded_values({"a": shared, "b": shared}) == 1 + 2 * (1 + 3)
    itself: list = []
    itself.append(itself)
    assert yaml_files.expanded_values(itself) == 2 and yaml_files.expanded_values("x") == 1
    deep: list = []
    for _ in range(50_000):  # deeper than Python's recursion limit
        deep = [deep]
    assert yaml_files.expanded_values(deep) == 50_001


def test_jsonschema_builds_no_message_longer_than_a_few_hundred_characters(demo, monkeypatch):
    built = []
    describe = config_module._describe
    monkeypatch.setattr(
        config_module, "_describe", lambda error, schema: built.append(error) or describe(error, schema)
    )
    demo["results_dir"] = ["x" * 100] * 50_000  # 50,001 values: within the limit; its repr is 5.2 million characters
    message = _error(demo)
    assert message.startswith("config key 'results_dir': ['xxx") and len(message) < 600
    assert len(built[0].message) < 1000


def test_a_bounded_copy_equals_its_original_shares_what_it_shares_and_prints_bounded():
    shared = ["x" * 1000] * 10
    data = {"a": shared, "b": shared, "n": 3, "s": "y" * 10_000}
    copy = yaml_files.bounded_copy(data)
    assert copy == data and copy["a"] is copy["b"] and isinstance(copy["s"], str)
    assert len(repr(copy)) < 300 and len(repr(copy["s"])) < 200
    assert repr(yaml_files.bounded_copy(["a", {"b": 1}])) == "['a', {'b': 1}]"


def test_an_integer_python_cannot_print_is_refused_naming_the_file_and_printed_bounded(tmp_path):
    path = tmp_path / "digits.yaml"
    path.write_text("lr: " + "1" * 5000 + "\n")
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(path))} holds a value Python cannot read"):
        load_yaml(path)
    assert yaml_files.bounded_repr({"lr": 10**5000}) == "{'lr': <an integer of 16,610 bits>}"


def test_a_thousand_unknown_keys_are_listed_five_at_most(demo):
    demo.update({f"extra{n:04d}": 1 for n in range(1000)})
    message = _error(demo)
    assert message.startswith(
        "config key '(top level)': unknown key 'extra0000', 'extra0001', 'extra0002', 'extra0003', 'extra0004', "
        "and 995 more; allowed keys: analysis,"
    )


@pytest.mark.parametrize(
    "value", [list(range(50_000)), "x" * 100_000, [[[[[list(range(1000))] * 9] * 9] * 9] * 9], {"k" * 50_000: 1}]
)
def test_a_bad_value_is_printed_bounded_in_the_error(demo, value):
    demo["architecture_defaults"]["lr"] = value
    message = _error(demo)
    assert message.startswith("config key 'architecture_defaults.lr'") and len(message) < 600, len(message)


@pytest.mark.parametrize(
    "path",
    [*sorted((REPO / "config").rglob("*.yaml")), REPO / "resources/paper_values.yaml", REPO / "tests/config/tiny.yaml"],
)
def test_every_shipped_yaml_file_reads_strictly(path):
    assert isinstance(load_yaml(path), dict)


def test_command_line_strings_become_the_numbers_the_schema_asks_for(demo):
    """`--config 'run={seeds: [1, 2, 3]}'` reaches the config as strings (Snakemake's YAML BaseLoader)."""
    demo["run"] = {"architectures": ["l4_h8", "l4_h8_attn"], "seeds": ["1", "2", "3"]}
    demo["cache"] = {"batch_size": "4", "prepend_bos": "false"}
    demo["analysis"] = {"cka_threshold": "0.5", "heldout_corpus": "null", "cka_kernel": "linear"}
    demo["architectures"]["l4_h8"]["seeds"] = {"first": "1", "last": "2"}
    config = validate_config(demo)
    assert config["run"]["seeds"] == [1, 2, 3] and architecture_spec(config, "l4_h8").seeds == (1, 2, 3)
    assert config["cache"]["batch_size"] == 4 and config["cache"]["prepend_bos"] is False
    assert config["analysis"]["cka_threshold"] == 0.5 and config["analysis"]["heldout_corpus"] is None
    assert config["analysis"]["cka_kernel"] == "linear"
    assert config["architectures"]["l4_h8"]["seeds"] == {"first": 1, "last": 2}


@pytest.mark.parametrize("value", [None, "all", ["primary", "len50"]])
def test_cache_activation_sets_takes_null_all_or_set_names(demo, value):
    demo["cache"] = {**demo.get("cache", {}), "activation_sets": value}
    assert validate_config(demo)["cache"]["activation_sets"] == value


@pytest.mark.parametrize("value", ["primary", ["primary", "primary"], [""], 3])
def test_a_bad_cache_activation_sets_fails_naming_the_key(demo, value):
    demo["cache"] = {**demo.get("cache", {}), "activation_sets": value}
    with pytest.raises(ConfigError, match="activation_sets"):
        validate_config(demo)


def test_a_string_that_is_no_number_still_fails_naming_the_key(demo):
    demo["run"]["seeds"] = ["1", "two"]
    assert "config key 'run.seeds'" in _error(demo)


def test_conda_environment_pins_match_requirements():
    requirements = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            requirements[name.lower()] = version
    env = yaml.safe_load((REPO / "envs/headstab.yaml").read_text())
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict))
    pinned = {}
    for line in pip_section:
        if "==" in line:
            name, version = line.split("==")
            pinned[name.lower()] = version
    assert pinned == requirements
    assert "python=3.11" in env["dependencies"]


def test_a_ulp_twin_outside_the_grid_is_refused_naming_the_key(demo):
    demo["architectures"]["l2_h8_grid"]["seed_grid"]["ulp_twins"] = ["1-1", "9-9"]
    with pytest.raises(ConfigError, match=r"architectures.l2_h8_grid.seed_grid.ulp_twins': ulp_twins \['9-9'\]"):
        architecture_spec(validate_config(demo), "l2_h8_grid")


def test_synthetic_corpus_repeated_spans_defaults_to_0_and_is_checked(demo):
    config = validate_config(demo)
    assert config["corpora"]["synthetic"]["repeated_spans"] == 3
    del demo["corpora"]["synthetic"]["repeated_spans"]
    assert validate_config(demo)["corpora"]["synthetic"]["repeated_spans"] == 0
    demo["corpora"]["synthetic"]["repeated_spans"] = -1
    with pytest.raises(ConfigError, match="repeated_spans"):
        validate_config(demo)


def test_demo_decayed_twins_decay_their_weights(demo):
    """lr x weight_decay x steps >= 1 for every AdamW architecture of the demo (AdamW's decay would be negligible)."""
    config = validate_config(demo)
    for name in config["architectures"]:
        spec = architecture_spec(config, name)
        if spec.optimizer == "adamw":
            steps = spec.n_tokens // spec.tokens_per_step
            assert spec.lr * spec.weight_decay * steps >= 1, name


@pytest.fixture()
def demo_circuits() -> dict:
    return load_yaml(REPO / "config/demo_circuits.yaml")


def test_the_induction_control_config_is_valid_and_its_words_fit_its_tokenizer(demo_circuits):
    config = validate_config(demo_circuits)
    planted = config["corpora"]["planted"]["planted_repeats"]
    assert planted["words"] + 1 == config["tokenizers"]["planted_words"]["vocab_size"]
    spec = architecture_spec(config, "l2_h8_attn")
    assert planted["document_words"] + 1 == spec.seq_len  # one document and its EOS per training window
    assert config["corpora"]["planted"]["n_documents"] // spec.batch_size == 6000  # steps of one epoch


def test_planted_corpus_with_a_bpe_tokenizer_fails_naming_model(demo_circuits):
    del demo_circuits["tokenizers"]["planted_words"]["model"]
    message = _error(demo_circuits)
    assert "tokenizers.planted_words.model" in message and "set `model: words`" in message


def test_word_tokenizer_too_small_for_the_planted_words_fails_naming_the_size(demo_circuits):
    demo_circuits["tokenizers"]["planted_words"]["vocab_size"] = 31
    message = _error(demo_circuits)
    assert "tokenizers.planted_words.vocab_size" in message and "raise it to 32" in message


def test_bpe_vocabulary_below_the_byte_alphabet_fails_naming_the_size_and_the_word_model(demo):
    demo["tokenizers"]["demo_bpe"]["vocab_size"] = 100
    message = _error(demo)
    assert "tokenizers.demo_bpe.vocab_size': 100 is below the 260" in message and "`model: words`" in message


def test_held_out_planted_corpus_with_words_its_tokenizer_lacks_fails_naming_both(demo_circuits):
    demo_circuits["corpora"]["planted_heldout"]["planted_repeats"]["words"] = 40
    message = _error(demo_circuits)
    assert "corpora.planted_heldout.planted_repeats.words': 40 words" in message
    assert "knows the 31 of corpus 'planted'" in message
