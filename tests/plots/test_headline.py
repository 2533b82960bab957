"""headstab.plots.headline: layer stability against relative depth for every architecture."""

import pandas as pd
import pytest

from headstab.plots.headline import plot_stability_by_depth


def test_each_architectures_layers_are_drawn_at_their_relative_depth(tmp_path, assert_written):
    rows = [(arch, "layer stability", layer, 0.8 - 0.1 * layer, 0.7, 0.9, 0.3)
            for arch, depth in (("l2_h8", 2), ("l4_h8_attn_wd", 4)) for layer in range(depth)]  # fmt: skip
    headline = pd.DataFrame(
        rows, columns=["architecture", "statistic", "layer", "estimate", "ci_low", "ci_high", "null"]
    )
    facts = {"l2_h8": {"n_layers": 2, "optimizer": "Adam", "attention_only": False},
             "l4_h8_attn_wd": {"n_layers": 4, "optimizer": "AdamW", "attention_only": True}}  # fmt: skip
    drawn = plot_stability_by_depth(headline, facts, tmp_path / "depth.png")
    assert_written(tmp_path / "depth.png")
    assert drawn.groupby("architecture")["relative_depth"].apply(list).to_dict() == {
        "l2_h8": [0.5, 1.0], "l4_h8_attn_wd": [0.25, 0.5, 0.75, 1.0]}  # fmt: skip
    with pytest.raises(ValueError, match="no layer stability rows"):
        plot_stability_by_depth(headline.assign(statistic="other"), facts, tmp_path / "x.png")
