"""Layout.parse is the inverse of every path method of Layout: each path it gives parses back to its kind,
its rule, and (for tables and figures) its scope, architecture and name."""

from __future__ import annotations

import pytest

from headstab.plan.layout import Layout, file_kind, writer_rule

CONFIG = {
    "results_dir": "res/run",
    "tokenizers": {"bpe": {"source": "train"}},
    "corpora": {"synthetic": {"n_shards": 2}},
}


def _cases(layout: Layout):
    return [
        (layout.final_weights("l2_h8", 3), ("checkpoint", "publish_refit", "", "", "final")),
        (layout.checkpoint_file("l2_h8", 3, "meta.json"), ("checkpoint", "publish_refit", "", "", "meta")),
        (layout.training_dir("l2_h8", 3) + "/final.pt", ("checkpoint", "train", "", "", "final")),
        (layout.train_block_record("l2_h8", "seeds1_2"), ("train block record", "train", "", "", "seeds1_2")),
        (layout.cache_path("l2_h8", 3), ("activation cache", "publish_cache", "", "", "seed3")),
        (layout.cache_block_file("l2_h8", "seeds3_4", 3), ("activation cache", "cache_activations", "", "", "seed3")),
        (
            layout.cache_block_record("l2_h8", "seeds3_4"),
            ("cache block record", "cache_activations", "", "", "seeds3_4"),
        ),
        (layout.similarity_path("l2_h8", "primary"), ("pair similarity", "pair_similarity", "", "", "primary")),
        (
            layout.grouped_similarity_path("l2_h8", "len5"),
            ("prompt-group similarity", "prompt_group_similarity", "", "", "len5"),
        ),
        (layout.snapshot_weights("l2_h8", 0, 2), ("snapshot weights", "init_weights", "", "", "final")),
        (layout.snapshot_weights("l2_h8", 40, 2), ("snapshot weights", "snapshot_weights", "", "", "final")),
        (
            layout.snapshot_cache_path("l2_h8", 0, 2),
            ("activation cache", "publish_snapshot_cache", "", "", "seed2"),
        ),
        (
            layout.snapshot_cache_block_file("l2_h8", 40, "seeds1_2", 2),
            ("activation cache", "cache_snapshot_activations", "", "", "seed2"),
        ),
        (
            layout.snapshot_cache_block_record("l2_h8", 0, "seeds1_2"),
            ("cache block record", "cache_snapshot_activations", "", "", "seeds1_2"),
        ),
        (layout.revision_digest("pythia", 2, "step0"), ("weights digest", "digest_revision", "", "", "step0")),
        (layout.refit_digest("pythia", 2), ("weights digest", "digest_refit", "", "", "final")),
        (layout.audit_record("pythia"), ("audit record", "audit_family", "", "", "audit")),
        (layout.corpus_shard("synthetic", "001"), ("token shard", "tokenize_shard", "", "", "shard_001")),
        (layout.corpus_meta("synthetic"), ("corpus meta", "corpus_meta", "", "", "meta")),
        (layout.synthetic_text("synthetic"), ("corpus text", None, "", "", "text")),
        (
            layout.heldout_shard("wikitext-2-raw-v1_test", "gpt2"),
            ("held-out shard", "heldout_wikitext", "", "", "gpt2"),
        ),
        (
            layout.heldout_shard("allenai--c4_en_validation_first1000", "gpt2").replace(".npy", ".json"),
            ("held-out shard", "heldout_neuron_text", "", "", "gpt2"),
        ),
        (layout.prompt_check_record("bpe", 128), ("prompt check", "check_prompts", "", "", "n_ctx128")),
        (layout.table_path("l2_h8", "head_stability"), ("table", None, "arch", "l2_h8", "head_stability")),
        (layout.figure_path("l2_h8", "alignment_map"), ("figure", None, "arch", "l2_h8", "alignment_map")),
        (layout.compare_table_path("l2_h8", "perplexity"), ("table", None, "compare", "l2_h8", "perplexity")),
        (layout.summary_table_path("headline"), ("table", None, "summary", "", "headline")),
        (layout.summary_figure_path("meta_sne"), ("figure", None, "summary", "", "meta_sne")),
        (
            layout.table_record(layout.table_path("l2_h8", "head_stability")),
            ("table record", None, "", "", "head_stability"),
        ),
        (
            layout.figure_record(layout.compare_figure_path("l2_h8", "perplexity")),
            ("figure record", None, "", "", "perplexity"),
        ),
        (layout.report_configuration_path(), ("configuration", "report_configuration", "", "", "configuration")),
        (layout.log("train", "l2_h8", "seed1"), ("log", None, "", "", "seed1")),
        (layout.benchmark("train", "l2_h8", "seed1"), ("benchmark", None, "", "", "seed1")),
    ]


@pytest.mark.parametrize("index", range(33))
def test_every_layout_path_parses_back(index):
    layout = Layout(CONFIG)
    path, (kind, rule, scope, arch, name) = _cases(layout)[index]
    parsed = Layout.parse(path)
    assert (parsed.kind, parsed.rule, parsed.scope, parsed.arch, parsed.name) == (kind, rule, scope, arch, name)
    assert file_kind(path) == kind and writer_rule(path) == rule


def test_a_file_the_workflow_does_not_write_parses_to_none():
    assert Layout.parse("res/run/notes.txt") is None and file_kind("res/run/notes.txt") is None


def test_the_environment_json_beside_a_corpus_or_tokenizer_meta_is_a_build_environment():
    """Written beside the meta.json (which holds content only) by the job that built it."""
    layout = Layout(CONFIG)
    corpus = layout.corpus_meta("synthetic").replace("meta.json", "environment.json")
    tokenizer = layout.tokenizer_meta("bpe").replace("meta.json", "environment.json")
    assert (file_kind(corpus), writer_rule(corpus)) == ("build environment", "corpus_meta")
    assert (file_kind(tokenizer), writer_rule(tokenizer)) == ("build environment", None)
