"""One file checked against its record: its sha256, its JSON record."""

from __future__ import annotations

from helpers.provenance_runs import fake_run

from headstab.provenance.checks import ProvenanceNode, check_sha256, read_record


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
