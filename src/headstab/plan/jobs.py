"""What the workflow plans from a validated config beyond paths (those are headstab.plan.layout's).

The params a job gets hold only what changes its result, so Snakemake reruns a job exactly when its
output would change; the prompt checks the architectures share; the jobs that need the internet.
Pure functions of the config; importable at parse time (no numpy).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from headstab.plan.hub_families import HUB_FAMILY
from headstab.plan.layout import Layout
from headstab.plan.seed_design import refit_seeds, ulp_perturbed
from headstab.plan.sources import PUBLISHED, checkpoint_source
from headstab.plan.spec import ArchitectureSpec

# The paper's held-out text for validation perplexity (§4.5) when analysis.heldout_corpus is null.
HELDOUT_HUB = {"name": "wikitext", "config_name": "wikitext-2-raw-v1", "split": "test"}
HELDOUT_HUB_DATASET = f"{HELDOUT_HUB['config_name']}_{HELDOUT_HUB['split']}"


def library_digest(*modules: str, root: str | Path | None = None) -> str:
    """sha256 of the source of headstab modules or subpackages (e.g. "statistics", "stability.py"): a rule
    whose params hold it reruns when the library code its result depends on changes, not only its script.
    root: the package directory (default: headstab's own)."""
    root = Path(__file__).resolve().parents[1] if root is None else Path(root)
    digest = hashlib.sha256()
    for name in modules:
        target = root / name
        if not target.exists():
            raise FileNotFoundError(f"headstab has no module or subpackage {name!r} under {root}")
        for path in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class WildcardLookup:
    """A Snakemake input, params or resource function: `table[<the job's wildcard>][key]...`.

    Constant time per job, where `lookup(dpath=..., within=table)` walks the whole table on every call
    (minutes of planning for the full paper's 2,420 train and cache jobs).
    """

    def __init__(self, table: Mapping[str, Any], wildcard: str, *keys: str) -> None:
        self.table, self.wildcard, self.keys = table, wildcard, keys

    def __call__(self, wildcards: Any) -> Any:
        value = self.table[getattr(wildcards, self.wildcard)]
        for key in self.keys:
            value = value[key]
        return value

    def __repr__(self) -> str:
        return f"WildcardLookup({{{self.wildcard}}}/{'/'.join(self.keys)})"


def names_regex(names: Iterable[str]) -> str:
    """A wildcard constraint matching exactly `names`, longest first (one that never matches when empty)."""
    ordered = sorted(names, key=len, reverse=True)
    return "|".join(ordered) if ordered else "(?!x)x"


def names_with_source(entries: Mapping[str, Mapping[str, Any]], source: str) -> list[str]:
    """The names of the `tokenizers` or `corpora` entries whose `source` is `source`."""
    return [name for name, entry in entries.items() if entry["source"] == source]


def job_spec(spec: ArchitectureSpec) -> dict[str, Any]:
    """The spec as plain data without its seed list: the params of a train or cache job, so that adding
    seeds retrains and re-caches none of the old ones."""
    values = spec.to_dict()
    del values["seeds"]
    return values


def analysis_spec(spec: ArchitectureSpec, act_fn: str | None) -> ArchitectureSpec:
    """The spec every analysis builds a refit's model from: `spec` with its activation replaced by `act_fn`
    (config key analysis.act_fn; None: the function the refit was trained with). Weights do not depend on it."""
    return spec if act_fn is None else dataclasses.replace(spec, act_fn=act_fn)


def paper_twins(specs: Mapping[str, ArchitectureSpec], grids: Iterable[str]) -> dict[str, str]:
    """Per seed grid, the selected paper architecture whose refit s is bit-identical to the grid's refit s-s.

    A paper twin's job_spec equals the grid's in every training, model, data and tokenizer field (all but name
    and seeds); a grid without one trains its diagonal itself.
    """
    grids = set(grids)

    def settings(spec: ArchitectureSpec) -> dict[str, Any]:
        return {key: value for key, value in job_spec(spec).items() if key != "name"}

    twins = {}
    for grid in grids:
        matches = [
            arch for arch, spec in specs.items() if arch not in grids and settings(spec) == settings(specs[grid])
        ]
        if matches:
            twins[grid] = matches[0]
    return twins


def paper_twin_diagonal(specs: Mapping[str, ArchitectureSpec], paper_twins: Mapping[str, str]) -> list[str]:
    """The grid refits s-s that rule reuse_paper_refit copies: s-s in the grid and s among its paper twin's seeds
    (never a one-ulp twin s-s-ulp, which trains)."""
    names = set()
    for grid, twin in paper_twins.items():
        for name in specs[grid].seeds:
            if ulp_perturbed(name):
                continue
            init_seed, data_seed = refit_seeds(name)
            if init_seed == data_seed and init_seed in specs[twin].seeds:
                names.add(str(name))
    return sorted(names)


def trained_refits(specs: Mapping[str, ArchitectureSpec], paper_twins: Mapping[str, str]) -> dict[str, list[int | str]]:
    """{architecture: the refits its train jobs train}: every refit, but a seed grid's s-s that its paper twin
    trains (rule reuse_paper_refit copies them; `paper_twins` as `paper_twins` returns)."""
    trained = {}
    for arch, spec in specs.items():
        twin = paper_twins.get(arch)
        copied = {refit for refit in paper_twin_diagonal(specs, {arch: twin})} if twin else set()
        trained[arch] = [refit for refit in spec.seeds if str(refit) not in copied]
    return trained


def corpus_source_inputs(config: Mapping[str, Any], layout: Layout, name: str) -> list[str]:
    """The files a corpus's documents come from: its synthetic text, its local path, or none (hub)."""
    entry = config["corpora"][name]
    if entry["source"] == "synthetic":
        return [layout.synthetic_text(name)]
    return [entry["path"]] if entry["source"] == "local" else []


def corpus_job_entry(config: Mapping[str, Any], layout: Layout, name: str) -> dict[str, Any]:
    """The corpus's config entry as a tokenize job sees it: `path` at the synthetic text for source
    synthetic, without expected_tokens (a runtime estimate: changing it must not re-tokenize)."""
    entry = {key: value for key, value in config["corpora"][name].items() if key != "expected_tokens"}
    if entry["source"] == "synthetic":
        entry["path"] = layout.synthetic_text(name)
    return entry


def tokenizer_training_entry(config: Mapping[str, Any], layout: Layout, name: str) -> dict[str, Any]:
    """The corpus entry tokenizer `name` trains on, without the keys that only shape the shards (changing
    n_tokens or n_shards must not retrain the tokenizer and re-tokenize everything)."""
    corpus = corpus_job_entry(config, layout, config["tokenizers"][name]["corpus"])
    return {key: value for key, value in corpus.items() if key not in ("n_tokens", "n_shards", "tokenizer")}


def tokenizer_jobs(config: Mapping[str, Any], layout: Layout) -> dict[str, dict[str, Any]]:
    """{tokenizer: what its jobs look up}: its directory and ready target, and for a trained tokenizer the
    corpus inputs and entry it trains on (data.smk; train and heldout_wikitext wait for the tokenizer)."""
    jobs = {}
    for name, entry in config["tokenizers"].items():
        trained = entry["source"] == "train"
        jobs[name] = {
            "dir": layout.tokenizer_dir(name),
            "target": layout.tokenizer_target(name),
            "training_inputs": corpus_source_inputs(config, layout, entry["corpus"]) if trained else [],
            "training_corpus": tokenizer_training_entry(config, layout, name) if trained else {},
        }
    return jobs


def prompt_checks(specs: Mapping[str, ArchitectureSpec]) -> dict[str, dict[str, list[str]]]:
    """{tokenizer: {n_ctx: architectures}}: one check_prompts job per tokenizer and context length."""
    checks: dict[str, dict[str, list[str]]] = {}
    for arch, spec in specs.items():
        checks.setdefault(spec.tokenizer, {}).setdefault(str(spec.n_ctx), []).append(arch)
    return checks


def extra_resid_hooks(config: Mapping[str, Any]) -> list[str]:
    """Residual hooks the caches store beside hook_resid_mid: the one analysis.cka_hook names, unless it
    is hook_resid_mid (always stored)."""
    hook = config["analysis"]["cka_hook"]
    return [] if hook == "hook_resid_mid" else [hook]


def activation_sets(config: Mapping[str, Any]) -> list[str] | None:
    """The prompt sets whose hook_z and residual hooks the caches store (None: every set).

    cache.activation_sets null (the default): the sets the configured analyses read them from, i.e.
    analysis.promptset (meta-SNE, activation norms and the residual CKA read that set alone; stability,
    similarity and prompt length read hook_pattern, stored for every set); "all": every set; a list:
    those sets, analysis.promptset added when missing.
    """
    wanted = config["cache"].get("activation_sets")
    if wanted == "all":
        return None
    primary = config["analysis"]["promptset"]
    listed = [] if wanted is None else list(wanted)
    return listed + ([primary] if primary not in listed else [])


def cache_options(
    config: Mapping[str, Any], patterns_only: bool = False, residual_sets: Sequence[str] | None = None
) -> dict[str, Any]:
    """The cache writer's options: config["cache"], with `extra_resid_hooks` only when there are any, so
    the default cka_hook leaves the params (and so the caches) as they are and another hook rebuilds them,
    and `activation_sets` resolved (`activation_sets`; left out for "all", as before the key existed).
    `pattern_compression_level` likewise only when set, so caches written before the key keep their params.
    patterns_only: a patterns-only cache's options (a training snapshot's), without activation_sets.
    residual_sets: hook_pattern everywhere plus the residual hooks (no hook_z) of these prompt sets alone (a step-0
    snapshot's, for the residual CKA's chance level): `residual_only` with them as activation_sets."""
    options = {
        key: value
        for key, value in config["cache"].items()
        if key != "activation_sets" and not (key == "pattern_compression_level" and value is None)
    }
    extra = extra_resid_hooks(config)
    if extra:
        options["extra_resid_hooks"] = extra
    if patterns_only:
        return {**options, "patterns_only": True}
    if residual_sets is not None:
        return {**options, "residual_only": True, "activation_sets": list(residual_sets)}
    sets = activation_sets(config)
    return options if sets is None else {**options, "activation_sets": sets}


def heldout_shards(
    config: Mapping[str, Any], specs: Mapping[str, ArchitectureSpec], layout: Layout
) -> dict[str, list[str]]:
    """{architecture: its held-out token shards}: analysis.heldout_corpus's shards, else wikitext-2 in the
    architecture's tokenizer. A held-out corpus in another tokenizer than an architecture's is refused."""
    corpus = config["analysis"]["heldout_corpus"]
    if corpus is None:
        return {arch: [layout.heldout_shard(HELDOUT_HUB_DATASET, spec.tokenizer)] for arch, spec in specs.items()}
    tokenizer = config["corpora"][corpus]["tokenizer"]
    mismatched = [arch for arch, spec in specs.items() if spec.tokenizer != tokenizer]
    if mismatched:
        raise ValueError(
            f"config key 'analysis.heldout_corpus': corpus '{corpus}' is tokenized with '{tokenizer}' but "
            f"architectures {mismatched} use another tokenizer; pick a held-out corpus with the same tokenizer, "
            "or null for wikitext-2"
        )
    return {arch: layout.corpus_shards(corpus) for arch in specs}


def neuron_heldout_dataset(config: Mapping[str, Any]) -> str | None:
    """The directory name of the neuron statistics' held-out text under data/heldout/: the hub dataset of
    neurons.heldout and the token budget, e.g. allenai--c4_en_validation_first10000000, so another dataset or
    budget is another shard (and new neuron statistics), never a stale one; None when neurons.heldout is null."""
    source = config["neurons"]["heldout"]
    if source is None:
        return None
    parts = [source["name"].replace("/", "--"), source.get("config_name"), source["split"]]
    name = "_".join(re.sub(r"[^A-Za-z0-9-]+", "-", str(part)) for part in parts if part is not None)
    return f"{name}_first{config['neurons']['tokens']}"


def neuron_heldout_shards(
    config: Mapping[str, Any], specs: Mapping[str, ArchitectureSpec], layout: Layout
) -> dict[str, list[str]]:
    """{architecture: the held-out token shards its neuron statistics stream}: neurons.heldout in the
    architecture's tokenizer (one shard per tokenizer), or `heldout_shards` when it is null."""
    dataset = neuron_heldout_dataset(config)
    if dataset is None:
        return heldout_shards(config, specs, layout)
    return {arch: [layout.heldout_shard(dataset, spec.tokenizer)] for arch, spec in specs.items()}


def run_corpora(config: Mapping[str, Any], specs: Mapping[str, ArchitectureSpec]) -> set[str]:
    """The corpora this run tokenizes: its trained architectures' (a published refit needs no corpus) and the
    held-out one."""
    held_out = config["analysis"]["heldout_corpus"]
    trained = {spec.corpus for arch, spec in specs.items() if checkpoint_source(config, arch).trained}
    return trained | ({held_out} if held_out and specs else set())


def published_targets(
    config: Mapping[str, Any], specs: Mapping[str, ArchitectureSpec], layout: Layout, kinds: tuple[str, ...]
) -> list[str]:
    """The final.pt of every seed of the architectures whose checkpoint source is one of `kinds`."""
    return [
        layout.final_weights(arch, seed)
        for arch, spec in specs.items()
        if checkpoint_source(config, arch).kind in kinds
        for seed in spec.seeds
    ]


def network_targets(config: Mapping[str, Any], specs: Mapping[str, ArchitectureSpec], layout: Layout) -> list[str]:
    """Outputs of every job of this run that downloads from the Hugging Face hub: hub tokenizers (and
    tokenizers trained on a hub corpus), hub corpora's metas, wikitext-2 when analysis.heldout_corpus is
    null, the neuron statistics' held-out text when neurons.heldout names a hub dataset, the published refits
    of source published and the hub models of source hub_family (with the digests of their audited revisions)."""
    tokenizers, corpora, run = config["tokenizers"], config["corpora"], run_corpora(config, specs)
    used = {spec.tokenizer for spec in specs.values()} | {corpora[name]["tokenizer"] for name in run}
    targets = [
        layout.tokenizer_target(name)
        for name in sorted(used)
        if tokenizers[name]["source"] == "hub"
        or (tokenizers[name]["source"] == "train" and corpora[tokenizers[name]["corpus"]]["source"] == "hub")
    ]
    targets += [layout.corpus_meta(name) for name in sorted(run) if corpora[name]["source"] == "hub"]
    if config["analysis"]["heldout_corpus"] is None:  # wikitext-2 from the hub, once per tokenizer
        targets += sorted({shard for shards in heldout_shards(config, specs, layout).values() for shard in shards})
    if neuron_heldout_dataset(config) is not None:  # the neuron statistics' text, once per tokenizer
        with_mlps = {arch: spec for arch, spec in specs.items() if not spec.attn_only}
        shards = neuron_heldout_shards(config, with_mlps, layout).values()
        targets += sorted({shard for arch_shards in shards for shard in arch_shards})
    families = [
        path
        for arch, spec in specs.items()
        for source in [checkpoint_source(config, arch)]
        if source.kind == HUB_FAMILY
        for seed in spec.seeds
        if source.model(seed).id is not None
        for path in [
            layout.final_weights(arch, seed),
            *(layout.revision_digest(arch, seed, revision) for revision in source.audit.revisions),
        ]
    ]
    return targets + published_targets(config, specs, layout, (PUBLISHED,)) + families
