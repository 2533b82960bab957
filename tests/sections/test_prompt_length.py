"""headstab.sections.prompt_length: §4.4.2 layer stability of the len{N} prompt sets."""

import numpy as np
import pandas as pd
import pytest

from headstab.sections.prompt_length import prompt_length_of, prompt_length_table


def test_prompt_length_table_picks_first_anchor_and_len_sets(layer_stability):
    stab = pd.concat(
        [
            layer_stability({2: [0.5, 0.4], 1: [0.2, 0.1]}, promptset="len10"),
            layer_stability({2: [0.7, 0.6], 1: [0.3, 0.35]}, promptset="len5"),
            layer_stability({1: [0.9, 0.9]}, promptset="primary"),
        ]
    )
    table = prompt_length_table(stab)
    assert list(table.columns) == ["prompt_length", "layer", "mean", "std", "anchor_seed"]
    assert table["prompt_length"].tolist() == [5, 5, 10, 10]
    assert table["mean"].tolist() == [0.3, 0.35, 0.2, 0.1]
    assert prompt_length_table(stab, anchor_seed=2)["mean"].tolist() == [0.7, 0.6, 0.5, 0.4]
    with pytest.raises(ValueError, match="length_sweep"):
        prompt_length_table(stab[stab.promptset == "primary"])


def test_prompt_length_of_names():
    assert prompt_length_of("len20") == 20 and prompt_length_of("primary") is None and prompt_length_of("len") is None


def test_prompt_length_table_of_a_mapping_and_a_missing_anchor(layer_stability):
    tables = {
        "len5": layer_stability({1: [0.5, 0.4]}).drop(columns="promptset"),
        "primary": layer_stability({1: [0.9, 0.9]}),
    }
    assert prompt_length_table(tables)["mean"].tolist() == [0.5, 0.4]
    with pytest.raises(ValueError, match=r"anchor_seed = 3; available: \['1'\]"):
        prompt_length_table(tables, anchor_seed=3)


def test_prompt_length_table_carries_interval_and_null_when_present(layer_stability):
    chance = {"ci_low": 0.0, "ci_high": 0.1, "null": 0.2, "null_ci_low": 0.3, "null_ci_high": 0.4}
    stab = pd.concat(
        [
            layer_stability({1: [0.2, 0.1], 2: [0.5, 0.5]}, promptset="len10"),
            layer_stability({1: [0.3, 0.35]}, promptset="len5"),
        ]
    )
    stab = stab.assign(**{name: stab["mean"] + offset for name, offset in chance.items()}, effect_size=3.0)
    table = prompt_length_table(stab)
    assert list(table.columns) == ["prompt_length", "layer", "mean", "std", "anchor_seed", *chance]
    for name, offset in chance.items():
        assert table[name].tolist() == pytest.approx([m + offset for m in (0.3, 0.35, 0.2, 0.1)])


def test_prompt_length_table_reads_the_same_layer_scope_with_integer_columns(layer_stability):
    stab = pd.concat(
        [
            layer_stability({1: [0.5, 0.4]}, promptset="len10"),
            layer_stability({1: [0.9, 0.8]}, promptset="len10", scope="cross_layer"),
            layer_stability({1: [0.3, 0.2]}, promptset="primary"),
        ]
    )
    table = prompt_length_table(stab)
    assert table["mean"].tolist() == [0.5, 0.4]
    assert table[["prompt_length", "layer"]].dtypes.tolist() == [np.int64, np.int64]
    assert prompt_length_table(stab, scope="cross_layer")["mean"].tolist() == [0.9, 0.8]


def test_prompt_length_refusals_name_the_table(layer_stability):
    stab = layer_stability({1: [0.5, 0.4]}, promptset="len10", scope="cross_layer")
    name = r"^layer stability of the len\{N\} prompt sets has no rows with "
    with pytest.raises(ValueError, match=name + "scope = 'same_layer'"):
        prompt_length_table(stab)
    with pytest.raises(ValueError, match=name + "anchor_seed = 2"):
        prompt_length_table(stab, anchor_seed=2, scope="cross_layer")
    message = (
        r"^no len\{N\} prompt sets in layer stability \(found \['primary'\]\); enable the length_sweep prompt set$"
    )
    with pytest.raises(ValueError, match=message):
        prompt_length_table(stab.assign(promptset="primary"))
