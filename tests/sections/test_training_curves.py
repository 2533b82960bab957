"""headstab.sections.training_curves and headstab.plots.training_curves: curves from train_log.csv, final
losses, whether a refit levelled off, and the two figures."""

from __future__ import annotations

import pandas as pd
import pytest

from headstab.plots.training_curves import plot_optimizer_training_curves, plot_training_curves
from headstab.sections.training_curves import final_losses, training_curves


def train_log(losses: list[float], tokens_per_row: int = 100) -> pd.DataFrame:
    """A train_log.csv with `losses` at rows of `tokens_per_row` tokens (steps of 10 tokens)."""
    n = len(losses)
    return pd.DataFrame(
        {
            "step": [10 * (i + 1) for i in range(n)],
            "tokens": [tokens_per_row * (i + 1) for i in range(n)],
            "loss": losses,
            "lr": 1e-3,
            "seconds": range(n),
        }
    )


def test_a_flat_last_quarter_levels_off_and_a_falling_one_does_not():
    # 8 rows at 100..800 tokens: the row nearest 3/4 of 800 is 600 (row 6)
    flat = train_log([6, 5, 4, 3.5, 3.2, 3.02, 3.01, 3.0])
    falling = train_log([6, 5.5, 5, 4.5, 4, 3.6, 3.3, 3.0])
    finals = final_losses(training_curves({2: falling, 1: flat}), plateau=0.02)
    assert list(finals["seed"]) == [1, 2]
    assert finals["final_loss"].tolist() == [3.0, 3.0]
    assert finals["last_quarter_drop"].tolist() == pytest.approx([0.02 / 3, 0.6 / 3])
    assert finals["converged"].tolist() == [True, False] and finals["tokens"].tolist() == [800, 800]


def test_a_log_without_loss_names_its_seed():
    with pytest.raises(ValueError, match="train_log.csv of seed 3 is empty or lacks \\['loss'\\]"):
        training_curves({3: train_log([1.0]).drop(columns="loss")})


def test_the_figures_draw_the_mean_and_the_final_loss_spread(tmp_path):
    adam = training_curves({1: train_log([6, 4, 3.0]), 2: train_log([6, 4, 3.2])})
    adamw = training_curves({1: train_log([6, 4, 3.4]), 2: train_log([6, 4, 3.4])})
    mean = plot_training_curves(adam, final_losses(adam), tmp_path / "curves.png", "l2_h8")
    assert mean["loss"].tolist() == pytest.approx([6, 4, 3.1])
    finals = pd.concat([final_losses(adam).assign(optimizer="Adam"), final_losses(adamw).assign(optimizer="AdamW")])
    spread = plot_optimizer_training_curves(
        {"Adam": adam, "AdamW": adamw}, finals, tmp_path / "pair.png", "l2_h8", "l2_h8_wd"
    )
    assert spread.set_index("optimizer")["mean"].to_dict() == pytest.approx({"Adam": 3.1, "AdamW": 3.4})
    assert (tmp_path / "curves.png").stat().st_size > 10_000 and (tmp_path / "pair.png").stat().st_size > 10_000


def test_curves_are_numbered_and_finals_sorted_by_seed_whatever_the_row_order():
    curves = training_curves({1: train_log([6, 5, 4, 3.0]), 2: train_log([6, 5, 4.5, 4.0])})
    assert curves.index.tolist() == list(range(8))
    seed_two_first = curves.sort_values(["seed", "step"], ascending=[False, True])
    assert final_losses(seed_two_first)["seed"].tolist() == [1, 2]


def test_a_drop_of_exactly_the_plateau_has_not_levelled_off():
    # 4 rows at 100..400 tokens: the row nearest 300 is row 3; (5 - 4) / 4 = 0.25, exact in binary
    finals = final_losses(training_curves({1: train_log([6, 5, 5, 4.0])}), plateau=0.25)
    assert finals["last_quarter_drop"].tolist() == [0.25] and finals["converged"].tolist() == [False]


def test_no_logs_or_a_log_without_steps_are_refused():
    with pytest.raises(ValueError, match="^training curves need at least one refit's train_log.csv$"):
        training_curves({})
    with pytest.raises(ValueError, match=r"^train_log.csv of seed 4 is empty or lacks \['step'\]; retrain that refit$"):
        training_curves({4: train_log([1.0]).drop(columns="step")})
