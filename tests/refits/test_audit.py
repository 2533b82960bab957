"""The provenance audit of seed suites: each defect found by hand in public suites, built into a tiny local GPT-NeoX
family (save_pretrained, one directory per revision), is refused with a message naming the checkpoints and the
numbers; a clean family and headstab's own trained refits pass."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers.hub_family_models import SEEDS, audit_config, build_tokenizer, train_run, write_revisions

from headstab.plan.family_audit import AuditSettings
from headstab.refits.audit import audit_family, audit_record, command_line_audit, main
from headstab.refits.weight_digest import Checkpoint, digest_weights, exact_relative_l2

REVISIONS = ["step0", "step1"]
SKETCH_TOLERANCE = 4 * np.sqrt(2 / 65536) / 2  # 4 s.d. of a distance estimated by the default sketch


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The tokenizer and clean GPT-NeoX runs: init seed s, data seed s, for s in 1..3, and their state dicts."""
    root = tmp_path_factory.mktemp("suite")
    tokenizer = build_tokenizer(root / "models/tokenizer")
    runs = {seed: train_run("neox", seed, seed, len(tokenizer)) for seed in SEEDS}
    return root, tokenizer, runs


def family(suite, tmp_path, runs, name="fam", audit=None, others=None):
    """A config of one family `name` with these runs (and `others`: {name: (runs, audit)}), its files under tmp_path."""
    root, tokenizer, _ = suite
    (tmp_path / "models").mkdir(exist_ok=True)
    if not (tmp_path / "models/tokenizer").exists():
        (tmp_path / "models/tokenizer").symlink_to(root / "models/tokenizer")
    entries = {}
    for each, (each_runs, each_audit) in {name: (runs, audit), **(others or {})}.items():
        path = write_revisions(tmp_path / "models" / each, "neox", each_runs, tokenizer)
        entries[each] = {
            "models": {"path": path, "revision": "final"},
            "audit": {"revisions": REVISIONS, **(each_audit or {})},
        }
    return audit_config(tmp_path, entries)


def edit_audit(config, name, **values):
    import yaml

    data = yaml.safe_load(config.read_text())
    data["architectures"][name]["audit"].update(values)
    config.write_text(yaml.safe_dump(data))


def audit_cli(capsys, name, config):
    code = main([name, "--configfile", str(config)])
    return code, capsys.readouterr().out


def test_a_clean_family_passes_with_the_exact_numbers(suite, tmp_path, capsys):
    _, _, runs = suite
    config = family(suite, tmp_path, runs)
    result = command_line_audit("fam", [str(config)], None, tmp_path)
    assert result.passed and result.findings == [] and result.not_checked == []
    for (s, t), distance in result.step0_distances.items():  # different inits: ~1.40 apart
        assert distance == pytest.approx(
            exact_relative_l2(_np(runs[s]["step0"]), _np(runs[t]["step0"])), rel=SKETCH_TOLERANCE
        )
    reference = float(np.median(list(result.step0_distances.values())))
    for seed, (start, after, distance, ratio) in result.descent.items():
        exact = exact_relative_l2(_np(runs[seed]["step0"]), _np(runs[seed]["step1"]))
        assert (start, after) == ("step0", "step1") and distance == pytest.approx(exact, rel=SKETCH_TOLERANCE)
        assert ratio == pytest.approx(exact / reference, rel=2 * SKETCH_TOLERANCE) and ratio < 0.01
    assert min(result.step0_distances.values()) > 1.3
    code, out = audit_cli(capsys, "fam", config)
    assert code == 0 and out.rstrip().endswith("passed")
    record = audit_record(result)
    assert record["passed"] and len(record["checkpoints"]) == 3 * 3 and record["descent"][0]["from"] == "step0"


def _np(state):
    return {name: tensor.numpy() for name, tensor in state.items()}


def test_step0_equal_to_step1_is_refused_as_a_duplicate(suite, tmp_path, capsys):
    """Pythia's step0 and step1 revisions hold the same weights (EleutherAI/pythia issue 83)."""
    _, _, runs = suite
    config = family(suite, tmp_path, {seed: {**run, "step1": run["step0"]} for seed, run in runs.items()})
    code, out = audit_cli(capsys, "fam", config)
    assert code == 1 and "hub family 'fam' is refused by its provenance audit (declared_axis both; 3 finding(s))" in out
    for seed in SEEDS:
        assert re.search(
            rf"\[duplicate:seed{seed}@step0=seed{seed}@step1\] seed{seed}@step0 \(.*/seed{seed}/step0\) and "
            rf"seed{seed}@step1 \(.*/seed{seed}/step1\) have identical weights \(sha256 [0-9a-f]{{12}}\)",
            out,
        ), out
    assert (
        "descent seed1 step0 -> step1: relative L2 0, ratio 0 " in out
    )  # a copy descends trivially: the duplicate check finds it


def test_a_branch_serving_the_final_weights_is_refused(suite, tmp_path, capsys):
    """Branches of one model along training that return the final weights (issues 195, 205, 206)."""
    _, _, runs = suite
    served = {seed: dict(run) for seed, run in runs.items()}
    served[2]["step4"] = served[2]["final"]
    config = family(suite, tmp_path, served, audit={"revisions": ["step0", "step1", "step4"]})
    result = command_line_audit("fam", [str(config)], None, tmp_path)
    assert [finding.id for finding in result.findings] == ["duplicate:seed2@step4=seed2@final"]
    assert result.descent[2][:2] == ("step0", "step1")  # the descent is measured at the first step, not the branch
    code, out = audit_cli(capsys, "fam", config)
    assert code == 1 and "[duplicate:seed2@step4=seed2@final] seed2@step4 (" in out


def weight_seed_suite(suite):
    """The decoupled suite: data-seed runs from one shared initialisation (init seed 7), and weight-seed runs whose
    step0 is their own initialisation but whose step1 is the data-seed run's (issue 203), trained on after it."""
    _, tokenizer, _ = suite
    data = {seed: train_run("neox", 7, seed, len(tokenizer)) for seed in SEEDS}
    weight = {}
    for seed in SEEDS:
        own = train_run("neox", 10 + seed, 0, len(tokenizer))
        after = train_run("neox", 0, 0, len(tokenizer), start=data[seed]["step1"])
        weight[seed] = {"step0": own["step0"], "step1": data[seed]["step1"], "final": after["final"]}
    return data, weight


def test_weight_seed_runs_equal_to_the_data_seed_runs_at_step1_are_refused(suite, tmp_path, capsys):
    data, weight = weight_seed_suite(suite)
    others = {"data": (data, {"declared_axis": "data_seed"})}
    config = family(suite, tmp_path, weight, name="weight", audit={"declared_axis": "init_seed"}, others=others)
    result = command_line_audit("weight", [str(config)], None, tmp_path)
    assert result.peers == ["data"]
    ids = [finding.id for finding in result.findings]
    assert ids == [f"duplicate:seed{s}@step1=data/seed{s}@step1" for s in SEEDS] + [f"descent:seed{s}" for s in SEEDS]
    for seed in SEEDS:  # not descended: as far from its own step0 as from another seed's (issue 203: 1.000)
        assert result.descent[seed][3] == pytest.approx(1.0, abs=0.05)
    code, out = audit_cli(capsys, "weight", config)
    assert code == 1
    assert re.search(
        r"\[duplicate:seed1@step1=data/seed1@step1\] seed1@step1 \(.*\) and data/seed1@step1 \(.*\) have identical", out
    )
    ratio = re.search(
        r"\[descent:seed2\] seed2@step1 \(.*\) is at relative L2 [\d.]+ from its own seed2@step0, ([\d.]+) of", out
    )
    assert ratio and float(ratio.group(1)) == pytest.approx(1.0, abs=0.05), out
    # the data-seed family shares its step0 by design (declared data_seed), but is served under the other names too
    data_result = command_line_audit("data", [str(config)], None, tmp_path)
    assert [f.check for f in data_result.findings] == ["duplicate"] * 3
    assert all(d == 0.0 for d in data_result.step0_distances.values())


def test_a_run_not_descended_from_its_own_step0_is_refused_with_ratio_one(suite, tmp_path, capsys):
    _, tokenizer, runs = suite
    stranger = train_run("neox", 9, 2, len(tokenizer))
    config = family(suite, tmp_path, {**runs, 2: {**stranger, "step0": runs[2]["step0"]}})
    result = command_line_audit("fam", [str(config)], None, tmp_path)
    assert [finding.id for finding in result.findings] == ["descent:seed2"]
    ratio = result.descent[2][3]
    assert ratio == pytest.approx(1.0, abs=0.05) and result.descent[1][3] < 0.01
    code, out = audit_cli(capsys, "fam", config)
    assert code == 1 and "[descent:seed2] seed2@step1 (" in out
    assert f"{ratio:.4g} of the seed-to-seed distance" in out and "descent_max 0.5): it does not continue" in out


def test_two_seeds_with_one_initialisation_contradict_different_init_seeds(suite, tmp_path, capsys):
    _, tokenizer, runs = suite
    twin = train_run("neox", 1, 2, len(tokenizer))  # seed 2: init seed 1, its own data order
    config = family(suite, tmp_path, {**runs, 2: twin})
    code, out = audit_cli(capsys, "fam", config)
    assert code == 1 and "(declared_axis both; 1 finding(s))" in out
    assert (
        "[init:seed1-seed2] seed1@step0 and seed2@step0 of 'fam' are at relative L2 0 (same_init_max 0.1): they start "
        "from one initialisation, but declared_axis both says their init seeds differ" in out
    )


def test_a_shared_initialisation_passes_once_relabelled_data_seed(suite, tmp_path, capsys):
    _, tokenizer, _ = suite
    shared = {seed: train_run("neox", 5, seed, len(tokenizer)) for seed in SEEDS}
    config = family(suite, tmp_path, shared)
    refused = command_line_audit("fam", [str(config)], None, tmp_path)
    assert [f.id for f in refused.findings] == ["init:seed1-seed2", "init:seed1-seed3", "init:seed2-seed3"]
    edit_audit(config, "fam", declared_axis="data_seed")
    result = command_line_audit("fam", [str(config)], None, tmp_path)
    assert result.passed and set(result.step0_distances.values()) == {0.0}
    # no pair of distinct inits: the denominator is the distance between independent draws of step0
    assert {source for _, source in result.reference.values()} == {
        "independent draws of its step-0 weights' per-tensor distribution"
    }
    code, _ = audit_cli(capsys, "fam", config)
    assert code == 0


def test_accepting_findings_by_id_passes_and_a_wrong_id_does_not(suite, tmp_path, capsys):
    _, _, runs = suite
    copied = {seed: {**run, "step1": run["step0"]} for seed, run in runs.items()}
    ids = [f"duplicate:seed{s}@step0=seed{s}@step1" for s in SEEDS]
    config = family(suite, tmp_path, copied, audit={"accept": ids[:2] + ["duplicate:seed3@step0=seed3@final"]})
    code, out = audit_cli(capsys, "fam", config)
    assert code == 1 and "(declared_axis both; 1 finding(s))" in out and f"accepted [{ids[0]}]" in out
    edit_audit(config, "fam", accept=ids)
    code, out = audit_cli(capsys, "fam", config)
    assert code == 0 and out.count("accepted [duplicate:") == 3


def test_headstabs_own_trained_refits_pass(tmp_path, capsys, one_thread):
    """Refits trained by headstab's loop: step 0 rebuilt from the seed (rule init_weights), the step-1 snapshot and
    final.pt, read from a results directory through the command line."""
    import yaml

    from headstab.plan.config import architecture_spec, load_yaml, validate_config
    from headstab.plan.layout import Layout
    from headstab.training import TrainingOptions, train_refit
    from headstab.training.snapshots import publish_snapshot, write_init_weights

    repo = Path(__file__).resolve().parents[2]
    config = load_yaml(repo / "tests/config/tiny.yaml")
    config["results_dir"] = str(tmp_path / "results")
    config["architectures"]["l2_h4"].update(snapshot_steps=[1], n_tokens=4 * 4 * 64, seeds=[1, 2, 3])
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    layout, spec = Layout(config), architecture_spec(validate_config(load_yaml(path)), "l2_h4")
    shards = []
    for i in range(2):
        shards.append(tmp_path / f"shard_{i}.npy")
        np.save(shards[-1], np.tile(np.arange(7, 300, 13), 40).astype(np.uint16))
    for seed in spec.seeds:
        write_init_weights(spec, seed, layout.snapshot_weights("l2_h4", 0, seed))
        train_refit(
            spec, seed, shards, layout.checkpoint_dir("l2_h4", seed), TrainingOptions(progress=False, device="cpu")
        )
        publish_snapshot(
            layout.checkpoint_dir("l2_h4", seed), 1, layout.snapshot_weights("l2_h4", 1, seed), "l2_h4", seed
        )
    result = command_line_audit("l2_h4", [str(path)], None, tmp_path)
    assert result.passed and result.settings.declared_axis == "both" and result.not_checked == []
    assert [c.label for c in result.checkpoints[:3]] == ["seed1@step0", "seed1@step1", "seed1@final"]
    assert all(1.0 < d < 1.5 for d in result.step0_distances.values())
    assert all(0 < ratio < 0.2 for *_, ratio in result.descent.values())
    code, out = audit_cli(capsys, "l2_h4", path)
    assert code == 0 and "descent seed3 step0 -> step1" in out


# ---------------------------------------------------------------- the checks on digests (no models)
def _state(seed, shift=0.0):
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(0, 0.02, (40, 30)).astype(np.float32) + np.float32(shift), "ln": np.ones(30, np.float32)}


def _checkpoints(states):
    return [Checkpoint(seed, rev, f"{seed}@{rev}", digest_weights(state)) for (seed, rev), state in states.items()]


def test_a_tensor_shared_by_two_revisions_is_a_partial_duplicate_but_a_constant_is_not():
    states = {}
    for seed in (1, 2):
        start = _state(seed)
        states[(seed, "step0")] = start
        states[(seed, "step1")] = {"w": start["w"] + np.float32(1e-4), "ln": start["ln"] + np.float32(1e-4)}
        states[(seed, "final")] = {"w": start["w"] + np.float32(0.01), "ln": start["ln"] + np.float32(0.01)}
    states[(2, "final")]["ln"] = states[(2, "step1")]["ln"]  # one tensor of seed 2's final is step 1's
    states |= {key: {**value, "buffer": np.arange(5, dtype=np.float32)} for key, value in states.items()}
    result = audit_family("fam", AuditSettings(revisions=("step0", "step1")), _checkpoints(states))
    assert [f.id for f in result.findings] == ["partial_duplicate:seed2@step1=seed2@final"]
    assert "share 1 of 3 tensors exactly (ln)" in result.findings[0].message  # not the buffer, equal everywhere


def test_the_descent_threshold_and_the_init_threshold_are_the_settings():
    states = {}
    for seed in (1, 2, 3):
        states[(seed, "step0")] = _state(seed)
        states[(seed, "step1")] = {
            "w": _state(seed)["w"] + _state(seed + 10)["w"] * np.float32(0.3),
            "ln": _state(seed)["ln"],
        }
    checkpoints = _checkpoints(states)
    ratio = audit_family("fam", AuditSettings(revisions=("step0", "step1")), checkpoints).descent[1][3]
    assert 0.1 < ratio < 0.4  # 0.3 of a draw moved, against about 1.2 between two draws
    below = audit_family("fam", AuditSettings(revisions=("step0", "step1"), descent_max=ratio * 1.01), checkpoints)
    above = audit_family("fam", AuditSettings(revisions=("step0", "step1"), descent_max=ratio * 0.99), checkpoints)
    assert "descent:seed1" not in [f.id for f in below.findings] and "descent:seed1" in [f.id for f in above.findings]
    distance = audit_family("fam", AuditSettings(revisions=("step0", "step1")), checkpoints).step0_distances[(1, 2)]
    wide = AuditSettings(revisions=("step0", "step1"), same_init_max=distance * 1.01)
    assert "init:seed1-seed2" in [f.id for f in audit_family("fam", wide, checkpoints).findings]
    shared = AuditSettings("data_seed", ("step0", "step1"))
    message = next(f.message for f in audit_family("fam", shared, checkpoints).findings if f.id == "init:seed1-seed2")
    assert f"at relative L2 {distance:.4g} (same_init_max 0.1): they start from different initialisations" in message


def test_without_an_initialisation_only_duplicates_are_checked_and_the_record_says_so():
    states = {(seed, "main"): _state(seed) for seed in (1, 2)} | {(3, "main"): _state(1)}
    result = audit_family("fam", AuditSettings(), _checkpoints(states))
    assert [f.id for f in result.findings] == ["duplicate:seed1@main=seed3@main"]
    assert audit_record(result)["not_checked"] == ["init and descent: audit.revisions lists no initialisation (step 0)"]
    # two peers sharing weights between them is their audit's business, not this family's
    peers = {"a": _checkpoints({(1, "main"): _state(9)}), "b": _checkpoints({(1, "main"): _state(9)})}
    assert audit_family("fam", AuditSettings(), _checkpoints({(1, "main"): _state(1)}), peers).findings == []
