"""Provenance records: the environment record every meta.json and HDF5 file carries, and one file checked
against its record."""

from __future__ import annotations

import subprocess

from helpers.provenance_runs import fake_run

from headstab.provenance.records import ProvenanceNode, check_sha256, environment_record, git_commit, read_record


def test_environment_record_names_packages_and_code_version():
    record = environment_record("cpu")
    assert record["device"] == "cpu"
    assert {"torch", "transformer-lens", "numpy", "python"} <= set(record["packages"])
    assert record["git_commit"]


def test_git_commit_is_the_commit_of_the_checkout_the_package_runs_from():
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit().removesuffix("-dirty") == head


def test_a_file_is_checked_against_its_recorded_sha256_only_with_verify(tmp_path):
    weights = fake_run(tmp_path)
    recorded = read_record(weights.parent / "meta.json", ProvenanceNode(str(weights), "checkpoint"), "metadata")
    expected = recorded["final_weights_sha256"]
    assert check_sha256(weights, expected, verify=True) == "ok"
    assert check_sha256(weights, None, verify=True) == "ok"  # nothing recorded: nothing to compare
    weights.write_bytes(b"other weights")
    assert check_sha256(weights, expected, verify=False) == "unverified"
    assert check_sha256(weights, expected, verify=True) == "sha256 mismatch"
    assert check_sha256(tmp_path / "absent.pt", expected, verify=True) == "missing"


def test_an_unreadable_record_marks_its_node(tmp_path):
    record = tmp_path / "meta.json"
    for text, status in [("[1, 2]", "unreadable"), ("{not json", "unreadable")]:
        record.write_text(text)
        node = ProvenanceNode(str(record), "checkpoint meta")
        assert read_record(record, node, "training metadata") is None and node.status == status, text
        assert str(record) in node.details["error"]
    node = ProvenanceNode(str(tmp_path / "absent.json"), "checkpoint meta")
    assert read_record(tmp_path / "absent.json", node, "training metadata") is None and node.status == "missing"
