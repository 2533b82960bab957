"""headstab.table_rows: the one row filter and the shared correlation."""

import math

import numpy as np
import pandas as pd
import pytest

from headstab.table_rows import pearson_or_nan, select_rows


@pytest.fixture
def table():
    return pd.DataFrame(
        {
            "promptset": ["primary", "primary", "len5", "len5"],
            "scope": ["same_layer", "cross_layer", "same_layer", "cross_layer"],
            "anchor_seed": [1, 1, 1, 2],
            "mean": [0.1, 0.2, 0.3, 0.4],
        }
    )


def test_rows_matching_every_filter_keep_table_order(table):
    rows = select_rows(table, "layer stability", promptset="len5")
    assert rows["mean"].tolist() == [0.3, 0.4]
    assert select_rows(table, "layer stability", promptset="len5", scope="cross_layer")["mean"].tolist() == [0.4]


def test_no_matching_row_names_table_column_value_and_what_there_is(table):
    with pytest.raises(
        ValueError, match=r"layer stability has no rows with promptset = 'len9'; available: \['len5', 'primary'\]"
    ):
        select_rows(table, "layer stability", promptset="len9")
    # the available values are those left by the filters before
    with pytest.raises(ValueError, match=r"anchor_seed = 2; available: \['1'\]"):
        select_rows(table, "layer stability", promptset="primary", anchor_seed=2)


def test_missing_column_is_an_error_naming_the_columns(table):
    with pytest.raises(ValueError, match=r"layer stability has no column 'matrix'; columns are \['promptset'"):
        select_rows(table, "layer stability", matrix="W_Q")


def test_none_filters_nothing_but_refuses_a_mixed_column(table):
    one_set = table[table["promptset"] == "primary"]
    pd.testing.assert_frame_equal(select_rows(one_set, "t", promptset=None), one_set)
    pd.testing.assert_frame_equal(select_rows(table, "t", matrix=None), table)  # absent column, None: fine
    with pytest.raises(ValueError, match=r"t holds several promptsets \['len5', 'primary'\]; pass promptset="):
        select_rows(table, "t", promptset=None)


def test_empty_table_fails(table):
    with pytest.raises(ValueError, match="t is empty"):
        select_rows(table.iloc[:0], "t")


def test_pearson_or_nan_is_nan_where_undefined_and_signed_for_two_points():
    assert all(math.isnan(v) for v in pearson_or_nan(np.array([1.0]), np.array([2.0])))
    assert all(math.isnan(v) for v in pearson_or_nan(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))
    r, p = pearson_or_nan(np.array([1.0, 2.0]), np.array([5.0, 3.0]))
    assert r == -1.0 and math.isnan(p)
    r, p = pearson_or_nan(np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 4.0, 6.0, 8.5]))
    assert 0.99 < r <= 1.0 and 0 <= p < 0.05
