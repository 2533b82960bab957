"""A family's audit settings from its config entry: defaults, the entry over architecture_defaults key by key,
and a refusal naming the key for every value the audit cannot use."""

from __future__ import annotations

import pytest

from headstab.plan.family_audit import (
    DESCENT_MAX,
    SAME_INIT_MAX,
    AuditSettings,
    audit_peers,
    audit_settings,
    settings_from_dict,
)
from headstab.plan.spec import ArchitectureSpec, ConfigError


def config(defaults=None, entry=None):
    return {
        "architecture_defaults": {"audit": defaults} if defaults else {},
        "architectures": {"fam": {"audit": entry or {}}},
    }


def test_defaults_and_the_entry_over_the_defaults_key_by_key():
    assert audit_settings(config(), "fam", ("main",)) == AuditSettings("both", (), (), SAME_INIT_MAX, DESCENT_MAX)
    settings = audit_settings(
        config({"revisions": ["step0", "step1"], "descent_max": 0.2}, {"declared_axis": "data_seed"}), "fam", ("main",)
    )
    assert settings == AuditSettings("data_seed", ("step0", "step1"), (), SAME_INIT_MAX, 0.2)
    assert settings.shared_init and settings.init_revision == "step0" and settings.descent_revision == "step1"
    one = AuditSettings(revisions=("step0",))
    assert one.init_revision == "step0" and one.descent_revision is None and AuditSettings().init_revision is None
    assert settings_from_dict(settings.to_dict()) == settings


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"axis": "both"}, r"'architectures.fam.audit': unknown key\(s\) \['axis'\]; use declared_axis, revisions"),
        ({"declared_axis": "seed"}, r"'architectures.fam.audit.declared_axis': 'seed' is not one of both, init_seed"),
        ({"revisions": ["refs/pr/1"]}, r"revisions': revision 'refs/pr/1' cannot name a file .*the commit hash"),
        ({"revisions": ["step0", "step0"]}, r"revisions': \['step0', 'step0'\] lists a revision twice"),
        ({"revisions": ["step0", "main"]}, r"revisions': \['main'\] is the analysed revision, which the audit"),
        ({"descent_max": 1.0}, r"'architectures.fam.audit.descent_max': 1.0 must lie strictly between 0 and 1.0"),
        ({"same_init_max": 0}, r"'architectures.fam.audit.same_init_max': 0.0 must lie strictly between 0 and 2.0"),
    ],
)
def test_a_value_the_audit_cannot_use_is_refused_naming_its_key(entry, message):
    with pytest.raises(ConfigError, match=message):
        audit_settings(config(entry=entry), "fam", ("main",))


def test_peers_are_the_families_of_the_same_dimensions(tiny_spec):
    specs = {
        "a": tiny_spec(name="a"),
        "b": tiny_spec(name="b", lr=1.0),  # trained differently, same shapes: can hold the same weights
        "c": tiny_spec(name="c", d_vocab=33),
    }
    assert audit_peers(specs, ["a", "b", "c"]) == {"a": ["b"], "b": ["a"], "c": []}
    assert isinstance(specs["a"], ArchitectureSpec)
