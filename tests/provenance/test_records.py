"""The environment record every meta.json and HDF5 file carries; training and the tokenizer loader import it
without the caches or h5py."""

from __future__ import annotations

import subprocess
import sys

from headstab.provenance.records import environment_record, git_commit


def test_environment_record_names_packages_and_code_version():
    record = environment_record("cpu")
    assert record["device"] == "cpu"
    assert {"torch", "transformer-lens", "numpy", "python"} <= set(record["packages"])
    assert record["git_commit"]


def test_git_commit_is_the_commit_of_the_checkout_the_package_runs_from():
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit().removesuffix("-dirty") == head


def test_training_and_the_tokenizer_loader_import_neither_the_caches_nor_h5py():
    code = (
        "import sys\n"
        "import headstab.refits.tokenizer, headstab.training.snapshots, headstab.provenance.records\n"
        "print(' '.join(m for m in ('h5py', 'headstab.activations', 'headstab.provenance.checks') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == []
