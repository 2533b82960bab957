"""headstab.plots.prompt_length: §4.4.2 figure: layer stability by prompt length."""

import pandas as pd

from headstab.plots.prompt_length import plot_prompt_length


def test_prompt_length(tmp_path, layer_stability, assert_written):
    table = pd.concat(
        [
            layer_stability(promptset=f"len{n}", offset=0.002 * n)[lambda d: d.anchor_seed == 1].assign(prompt_length=n)
            for n in (5, 10, 20, 30, 40, 50)
        ]
    )
    data = plot_prompt_length(table, tmp_path / "prompt_length.png", "l4_h8")
    assert_written(tmp_path / "prompt_length.png")
    assert list(data.columns) == [5, 10, 20, 30, 40, 50]  # one line per length
