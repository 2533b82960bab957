"""Recorded paths moved onto the results directory of the file that records them: results roots read from each
kind's place in the layout, by hand."""

from __future__ import annotations

from pathlib import Path, PurePath

import pytest

from headstab.provenance.relocation import rebased, results_root


@pytest.mark.parametrize(
    ("path", "root"),
    [
        ("a/b/l2_h4/caches/seed1.h5", "a/b"),
        ("a/b/l2_h4/caches/blocks/b0/seed1.h5", "a/b"),
        ("/x/l2_h4/similarity/primary.groups.h5", "/x"),
        ("l2_h4/similarity/primary.h5", "."),
        ("r/l2_h4/checkpoints/seed3/final.pt", "r"),
        ("r/l2_h4/checkpoints/seed3/training/meta.json", "r"),
        ("r/l2_h4/checkpoints/seed3/training/snapshots/step4/final.pt", "r"),
        ("r/l2_h4/snapshots/step0/weights/seed1/final.pt", "r"),
        ("r/l2_h4/snapshots/step40/caches/seed1.h5", "r"),
        ("r/data/toy/meta.json", "r"),
        ("r/tokenizers/toy_bpe/tokenizer.json", "r"),
        ("r/l2_h4/tables/head_stability.csv", "r"),
        ("r/compare/l2_h4/tables/optimizer_stability.csv", "r"),
        ("r/summary/tables/headline.csv", "r"),
    ],
)
def test_the_results_root_of_each_kind_of_file(path, root):
    assert results_root(path) == PurePath(root)


@pytest.mark.parametrize("path", ["caches/seed1.h5", "hub/models--gpt2/snapshots/abc/tokenizer.json", "prompts/a.txt"])
def test_no_results_root_for_a_path_too_short_to_tell_or_outside_any_layout(path):
    assert results_root(path) is None


def test_a_recorded_path_follows_its_holder_onto_another_results_directory():
    holder = "copy/l2_h4/similarity/primary.h5"
    assert rebased("results/tiny/l2_h4/caches/seed1.h5", holder) == Path("copy/l2_h4/caches/seed1.h5")
    assert rebased("results/tiny/data/toy/meta.json", "copy/l2_h4/checkpoints/seed1/meta.json") == Path(
        "copy/data/toy/meta.json"
    )
    assert rebased("results/tiny/l2_h4/caches/seed1.h5", "results/tiny/l2_h4/similarity/primary.h5") == Path(
        "results/tiny/l2_h4/caches/seed1.h5"
    )
    assert rebased("/hub/models--gpt2/snapshots/abc/tokenizer.json", holder) == Path(
        "/hub/models--gpt2/snapshots/abc/tokenizer.json"
    )
