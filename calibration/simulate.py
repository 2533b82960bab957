"""Simulated data with the dependence of the real data, for the calibration cases: symmetric pair blocks
(s[a, b] = s[b, a]), refit effects shared by every pair a refit enters, refit-specific layer offsets of mean zero
over refits, sharper and broader layers, prompt groups.

`StabilityModel` and `simulate_grouped` give prompt-group similarity tensors s[g, a, b, l, i, j] (the layout of
`headstab.similarity.prompt_groups.GroupedSimilarity`), built as

    s = floor_l + u_a + u_b + v_al + v_bl + h_ali + h_blj + e_abl + D_l[pi_al(i), pi_bl(j)] + w_gl + eps_gablij

with u the refit effect (every pair the refit enters), v the refit-specific layer offset (mean zero over refits),
h a head's own level, e a symmetric pair effect, D_l the layer's fixed candidate structure (symmetric; a clear
best match on its diagonal, or none: exchangeable candidates), pi_a a random order of refit a's heads (head
indices mean nothing across refits), w the prompt-group effect and eps the group-mean noise of a cell, symmetric
under (a, i) <-> (b, j). Layers differ in floor, noise and offsets (sharper and broader layers).

The known true value (the estimand): the population stability, i.e. the statistic with infinitely many refits
and prompts. u, v, e, w and eps average to zero, so head i of anchor a in layer l has the true stability
floor_l + u_a + v_al + h_ali + c_l[pi_al(i)], c_l[r] = E max_k (D_l[r, k] + h_k) over a random partner's head
levels h_k ~ N(0, head_sd) (`expected_max`, by quadrature), and the pooled layer stability is
floor_l + mean_r c_l[r]. The group-mean noise is no part of it: the max over candidates of noisy means lies
above the max of the true means (docs/statistics.md, "Upward bias for a max of means").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import stats

__all__ = [
    "Dataset",
    "LARGE_N",
    "RefitEffects",
    "SCENARIOS",
    "Scenario",
    "StabilityModel",
    "OptimizerPairScenario",
    "anchor_layer_values",
    "at_refits",
    "clustered_rows",
    "coarser",
    "depth_profile",
    "draw_refits",
    "expected_max",
    "graded_layer_similarity",
    "layered_grouped_similarity",
    "mixed_draws",
    "one_thread",
    "prompt_draws",
    "shared_draws",
    "simulate_dataset",
    "simulate_grouped",
    "simulate_optimizer_pair",
    "stability_scenario",
    "symmetric_pair_values",
    "true_one_to_one",
    "true_stability",
    "adamw_refits",
]


def symmetric_pair_values(rng: np.random.Generator, refit_effect: np.ndarray, pair_sd: float) -> np.ndarray:
    """[refit, refit] values refit_effect[a] + refit_effect[b] + symmetric pair noise (s.d. pair_sd), diagonal 0."""
    n = len(refit_effect)
    noise = rng.normal(scale=pair_sd, size=(n, n))
    values = refit_effect[:, None] + refit_effect[None, :] + (noise + noise.T) / np.sqrt(2)
    np.fill_diagonal(values, 0.0)
    return values


def _symmetric_pairs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Unit noise [..., refit_a, refit_b, layer, head_a, head_b] with x[a, b, l, i, j] = x[b, a, l, j, i]."""
    noise = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(np.sqrt(0.5))
    return noise + np.swapaxes(np.swapaxes(noise, -5, -4), -2, -1)


def _prompt_profile(rng: np.random.Generator, weights: np.ndarray, n_layers: int, sd: float) -> np.ndarray:
    """[group, layer] shifts whose size-weighted mean over groups has s.d. `sd` per layer (mean 0)."""
    return rng.normal(scale=sd / np.sqrt(np.sum(weights**2)), size=(len(weights), n_layers))


def layered_grouped_similarity(
    rng: np.random.Generator,
    n_groups: int,
    stability: np.ndarray,
    commonness: np.ndarray,
    n_heads: int = 4,
    confound: float = 0.0,
    prompt_sd: tuple[float, float] = (0.0, 0.0),
):
    """Prompt-group similarity tensors (`headstab.similarity.prompt_groups.GroupedSimilarity`) of refits
    whose layers differ, with the dependence of real ones, and each head's expected commonness.

    stability, commonness: [refit, layer] what each refit's layer adds above chance: to its heads' match with
    their counterpart (head i of every other refit) and to the similarity of peer heads within the refit.
    - sharper and broader layers: each layer has its own chance floor (0.3-0.6) and noise (0.02-0.06);
    - a refit's sharper layer: sharpness offsets of mean zero over refits lower the floor of every pair the
      refit enters (observed and null alike) and its heads' entropy; `confound` x the sharpness (the floor's
      distance below 0.45, linear in the entropy) adds to what the layer adds above chance, to stability and
      commonness alike;
    - symmetric pair blocks s[a, b, l, i, j] = s[b, a, l, j, i]; a head against itself is 1 on its prompt and
      floor + 0.3 on a partner prompt (the null's diagonal);
    - prompt groups of 3 or 4 prompts, each group's noise shrinking with its size; prompt_sd (stability,
      commonness): the s.d. of a per-layer shift shared by every refit (prompts on which a layer's heads
      agree across refits, or are alike within one), drawn per group.
    Returns (grouped, truth): truth float64 [refit, layer, head] arrays "commonness_excl_self",
    "commonness_excl_self_null", "commonness_excl_self_above_null" and "commonness" (Eq. 10): expectations
    over the population of prompts.
    """
    from headstab.similarity.prompt_groups import GroupedSimilarity

    n_refits, n_layers = stability.shape
    floor, spread = rng.uniform(0.3, 0.6, size=n_layers), rng.uniform(0.02, 0.06, size=n_layers)
    offsets = rng.normal(scale=0.03, size=(n_refits, n_layers))
    offsets -= offsets.mean(axis=0)
    refit_floor = floor - offsets  # a sharper refit layer (offset > 0) sits lower
    n_prompts = 3 * n_groups + int(rng.integers(n_groups))  # split as prompt_groups splits: sizes differ by <= 1
    sizes = np.array([len(part) for part in np.array_split(np.arange(n_prompts), n_groups)])
    weights = sizes / sizes.sum()
    shape = (n_groups, n_refits, n_refits, n_layers, n_heads, n_heads)
    scale = (spread * np.sqrt(sizes.mean() / sizes)[:, None])[:, None, None, :, None, None]
    pair_floor = ((refit_floor[:, None] + refit_floor[None, :]) / 2)[None, ..., None, None]
    null = pair_floor + _symmetric_pairs(rng, shape) * scale
    observed = pair_floor + _symmetric_pairs(rng, shape) * scale
    eye = np.eye(n_heads, dtype=bool)
    sharpness = 0.45 - refit_floor  # [refit, layer]; the entropy below is linear in it
    above = stability + confound * sharpness
    agreement = (above[:, None] + above[None, :]) / 2  # [a, b, layer]
    observed[..., eye] += (
        agreement[None, ..., None] + _prompt_profile(rng, weights, n_layers, prompt_sd[0])[:, None, None, :, None]
    )
    peers = commonness + confound * sharpness
    shared = _prompt_profile(rng, weights, n_layers, prompt_sd[1])  # [group, layer]
    for refit in range(n_refits):
        block, null_block = observed[:, refit, refit], null[:, refit, refit]  # views [group, layer, head, head]
        block += (peers[refit] + shared)[..., None, None]
        block[..., eye] = 1.0
        null_block[..., eye] = (refit_floor[refit] + 0.3)[None, :, None]
    entropy = 0.5 + 0.5 * refit_floor[..., None] + rng.normal(scale=0.002, size=(n_refits, n_layers, n_heads))
    lengths = np.full(int(sizes.sum()), 8)
    partners = np.roll(np.arange(lengths.size), 1)
    grouped = GroupedSimilarity(
        observed.astype(np.float32), null.astype(np.float32), sizes, list(range(n_refits)), partners, lengths, entropy
    )
    excl = np.repeat((refit_floor + peers)[..., None], n_heads, axis=-1)
    excl_null = np.repeat(refit_floor[..., None], n_heads, axis=-1)
    truth = {
        "commonness_excl_self": excl,
        "commonness_excl_self_null": excl_null,
        "commonness_excl_self_above_null": excl - excl_null,
        "commonness": (1.0 + (n_heads - 1) * excl) / n_heads,
    }
    return grouped, truth


@dataclass(frozen=True)
class StabilityModel:
    """One population of prompt-group similarity; tuples are per layer. The defaults follow the demo's
    primary prompt set (20 groups of 5 prompts): a cell's group mean varies with s.d. 0.02-0.04 over groups,
    a group shifts a whole layer by 0.01-0.02, per-anchor layer stability varies by 0.005-0.03 over refits."""

    floors: tuple[float, ...] = (0.45, 0.7)  # a broad layer (low floor) and a sharp one
    cell_sd: tuple[float, ...] = (0.03, 0.04)
    group_sd: tuple[float, ...] = (0.012, 0.02)
    layer_offset_sd: tuple[float, ...] = (0.006, 0.015)
    refit_sd: float = 0.01
    head_sd: float = 0.01
    pair_sd: float = 0.008
    best_match: float = 0.1  # D's diagonal: 0 gives exchangeable candidates
    candidate_sd: float = 0.0  # spread of D's entries (drawn once per model, seed structure_seed)
    n_heads: int = 4
    n_groups: int = 20
    group_size: int = 5
    structure_seed: int = 0

    @property
    def n_layers(self) -> int:
        return len(self.floors)

    def structure(self) -> np.ndarray:
        """D: float64 [layer, head, head], symmetric in its head axes, fixed by the model."""
        rng = np.random.default_rng(self.structure_seed)
        noise = rng.normal(scale=self.candidate_sd, size=(self.n_layers, self.n_heads, self.n_heads))
        return (noise + noise.transpose(0, 2, 1)) / np.sqrt(2) + self.best_match * np.eye(self.n_heads)

    def shifted(self, shift: float) -> StabilityModel:
        """The same population with every floor raised by `shift`."""
        return replace(self, floors=tuple(f + shift for f in self.floors))


@dataclass(frozen=True)
class RefitEffects:
    """What a refit carries into every pair it enters: u [refit], v [refit, layer], h [refit, layer, head], and
    the order of its heads pi [refit, layer, head]."""

    u: np.ndarray
    v: np.ndarray
    h: np.ndarray
    order: np.ndarray = field(repr=False)

    def scaled(self, factor: float) -> RefitEffects:
        return RefitEffects(self.u * factor, self.v * factor, self.h * factor, self.order)


def draw_refits(rng: np.random.Generator, model: StabilityModel, n: int) -> RefitEffects:
    """n refits' effects: u ~ N(0, refit_sd), v ~ N(0, layer_offset_sd_l), h ~ N(0, head_sd), random head orders."""
    shape = (n, model.n_layers, model.n_heads)
    return RefitEffects(
        rng.normal(scale=model.refit_sd, size=n),
        rng.normal(size=(n, model.n_layers)) * np.asarray(model.layer_offset_sd),
        rng.normal(scale=model.head_sd, size=shape),
        np.argsort(rng.random(shape), axis=-1),
    )


def _symmetric_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Unit-variance noise [..., a, b, layer, i, j] equal under (a, i) <-> (b, j)."""
    z = rng.standard_normal(shape)
    return (z + np.swapaxes(np.swapaxes(z, -5, -4), -2, -1)) / np.sqrt(2)


def prompt_draws(rng: np.random.Generator, model: StabilityModel, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit-variance prompt draws of n refits: group effects [group, layer] and symmetric cell noise
    [group, seed_a, seed_b, layer, head_a, head_b] (`simulate_grouped` scales them by the model's s.d.)."""
    effect = rng.standard_normal((model.n_groups, model.n_layers))
    return effect, _symmetric_noise(rng, (model.n_groups, n, n, model.n_layers, model.n_heads, model.n_heads))


def mixed_draws(rng: np.random.Generator, draws: tuple[np.ndarray, ...], rho: float) -> tuple[np.ndarray, ...]:
    """Draws correlated rho with `draws` (unit variance kept): rho x + sqrt(1 - rho^2) x', x' fresh and alike."""
    fresh = [(z + np.swapaxes(np.swapaxes(z, -5, -4), -2, -1)) / np.sqrt(2) if x.ndim == 6 else z for x in draws
             for z in [rng.standard_normal(x.shape)]]  # fmt: skip
    return tuple(rho * x + np.sqrt(1.0 - rho**2) * z for x, z in zip(draws, fresh, strict=True))


def simulate_grouped(
    rng: np.random.Generator,
    model: StabilityModel,
    refits: RefitEffects,
    prompts: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """float32 [group, seed_a, seed_b, layer, head_a, head_b] prompt-group similarity (module docstring);
    prompts: the unit draws of `prompt_draws` (drawn here when None), so two studies can share their prompts."""
    n, n_layers, n_heads = refits.h.shape
    structure = model.structure()
    layer = np.arange(n_layers)[None, None, :, None, None]
    ordered = structure[layer, refits.order[:, None, :, :, None], refits.order[None, :, :, None, :]]
    pair = rng.normal(scale=model.pair_sd, size=(n, n, n_layers))
    base = (
        np.asarray(model.floors)[None, None, :, None, None]
        + (refits.u[:, None] + refits.u[None, :])[..., None, None, None]
        + (refits.v[:, None] + refits.v[None, :])[..., None, None]
        + refits.h[:, None, :, :, None]
        + refits.h[None, :, :, None, :]
        + ((pair + pair.transpose(1, 0, 2)) / np.sqrt(2))[..., None, None]
        + ordered
    )
    effect, noise = prompt_draws(rng, model, n) if prompts is None else prompts
    noise = noise * np.asarray(model.cell_sd)[:, None, None]
    effect = effect * np.asarray(model.group_sd)
    return (base[None] + noise + effect[:, None, None, :, None, None]).astype(np.float32)


def expected_max(values: np.ndarray, sd: float, points: int = 4001) -> float:
    """E max_k (values[k] + sd Z_k), Z_k i.i.d. standard normal: lo + integral of (1 - F) from lo, by the
    trapezoid rule over [min - 9 sd, max + 9 sd]; max(values) when sd is 0."""
    values = np.asarray(values, dtype=np.float64)
    if sd == 0:
        return float(values.max())
    x = np.linspace(values.min() - 9 * sd, values.max() + 9 * sd, points)
    cdf = np.prod(stats.norm.cdf((x[:, None] - values[None, :]) / sd), axis=1)
    return float(x[0] + np.trapezoid(1.0 - cdf, x))


@functools.lru_cache(maxsize=64)
def _row_maxima(model: StabilityModel) -> np.ndarray:
    """c [layer, row]: E max_k (D_l[row, k] + h_k), h_k ~ N(0, head_sd) (read-only)."""
    best = np.array([[expected_max(row, model.head_sd) for row in block] for block in model.structure()])
    best.flags.writeable = False
    return best


def true_stability(model: StabilityModel, refits: RefitEffects | None = None) -> dict[str, np.ndarray]:
    """The estimands (module docstring): "layer" [layer] pooled layer stability, and with refits also "head"
    [anchor, layer, head] and "anchor_layer" [anchor, layer], the anchor's own stability (its effects fixed)."""
    best = _row_maxima(model)
    floors = np.asarray(model.floors)
    truth = {"layer": floors + best.mean(axis=1)}
    if refits is not None:
        rows = np.take_along_axis(np.broadcast_to(best, refits.order.shape), refits.order, axis=-1)
        head = floors[None, :, None] + refits.u[:, None, None] + refits.v[..., None] + refits.h + rows
        truth.update(head=head, anchor_layer=head.mean(axis=-1))
    return truth


def true_one_to_one(model: StabilityModel) -> np.ndarray:
    """[layer] population one-to-one stability: floor_l + the best assignment's mean of D_l (every partner head
    is assigned once, so the heads' own levels h add their mean, zero)."""
    from scipy.optimize import linear_sum_assignment

    structure = model.structure()
    best = [block[linear_sum_assignment(block, maximize=True)].mean() for block in structure]
    return np.asarray(model.floors) + np.asarray(best)


@dataclass(frozen=True)
class Scenario:
    """A study's populations: the trained refits' observed similarity, its prompt-permutation null (the same
    refits' effects, its own structure), the content variant (observed and null), and the refits at step 0."""

    name: str
    observed: StabilityModel
    null: StabilityModel
    content: StabilityModel
    content_null: StabilityModel
    init: StabilityModel
    cross_gap: float = 0.15  # cross-layer candidates sit this far below the lowest floor


@dataclass(frozen=True)
class Dataset:
    """One simulated study: `grouped` and `init` as `GroupedSimilarity`, `similarity` the pair-similarity tensor
    [seed_a, seed_b, layer_a, head_a, layer_b, head_b], `refits` the trained refits' effects."""

    grouped: object
    init: object
    similarity: np.ndarray
    refits: RefitEffects


def _pair_tensor(rng: np.random.Generator, scenario: Scenario, refits: RefitEffects, same: np.ndarray) -> np.ndarray:
    """[a, b, layer_a, head_a, layer_b, head_b]: the same-layer blocks `same` [a, b, layer, i, j], other layers'
    candidates at the lowest floor - cross_gap with the refits' effects and the noise of a full-prompt mean."""
    model = scenario.observed
    n, n_layers, n_heads = refits.h.shape
    shape = (n, n, n_layers, n_heads, n_layers, n_heads)
    z = rng.standard_normal(shape)
    noise = (z + z.transpose(1, 0, 4, 5, 2, 3)) / np.sqrt(2) * max(model.cell_sd) / np.sqrt(model.n_groups)
    pair = (
        min(model.floors)
        - scenario.cross_gap
        + (refits.u[:, None] + refits.u[None, :])[..., None, None, None, None]
        + refits.h[:, None, :, :, None, None]
        + refits.h[None, :, None, None, :, :]
        + noise
    )
    layers = np.arange(n_layers)
    pair[:, :, layers, :, layers, :] = np.moveaxis(same, 2, 0)
    return pair.astype(np.float32)


def simulate_dataset(rng: np.random.Generator, scenario: Scenario, n: int):
    """One study of n refits of `scenario` (a Dataset); prompts of 20 tokens, groups of the model's size."""
    from headstab.similarity.prompt_groups import GroupedSimilarity, group_mean

    model = scenario.observed
    refits = draw_refits(rng, model, n)
    kinds = {
        "observed": (scenario.observed, refits),
        "null": (scenario.null, refits),
        "content_observed": (scenario.content, refits),
        "content_null": (scenario.content_null, refits),
    }
    tensors = {name: simulate_grouped(rng, pop, effects) for name, (pop, effects) in kinds.items()}
    sizes = np.full(model.n_groups, model.group_size, dtype=np.int64)
    n_prompts = int(sizes.sum())
    common = {"group_sizes": sizes, "seeds": list(range(1, n + 1)), "partners": np.roll(np.arange(n_prompts), 1)}
    common["lengths"] = np.full(n_prompts, 20, dtype=np.int64)
    entropy = 0.6 - 3.0 * refits.h + rng.normal(scale=0.02, size=refits.h.shape)
    grouped = GroupedSimilarity(entropy=entropy, **tensors, **common)
    init_refits = draw_refits(rng, scenario.init, n)
    init = GroupedSimilarity(
        observed=simulate_grouped(rng, scenario.init, init_refits),
        null=simulate_grouped(rng, scenario.init, init_refits),
        **common,
    )
    same = group_mean(tensors["observed"], sizes).astype(np.float32)
    return Dataset(grouped, init, _pair_tensor(rng, scenario, refits, same), refits)


def shared_draws(study):
    """Wrap study(rng, n) -> result so that the cases of one study compute each dataset once.

    `harness.evaluate` seeds every case alike, so the k-th dataset of every case built on the same study is the
    same draw: results are keyed by the generator's state before the draw, and a repeat restores the state the
    draw left (the next dataset is then the same as without the cache).
    """
    cache: dict[tuple[int, str], tuple[dict, object]] = {}

    def run(rng: np.random.Generator, n: int):
        key = (n, repr(rng.bit_generator.state))
        if key not in cache:
            result = study(rng, n)
            cache[key] = (rng.bit_generator.state, result)
        state, result = cache[key]
        rng.bit_generator.state = state
        return result

    return run


def stability_scenario(name: str, observed: StabilityModel) -> Scenario:
    """The trained refits' population `observed` with the rest of a study built from it: a null of lower floors
    and exchangeable candidates (partner prompts share no content), a content variant near zero with the
    observed structure and its null, and step-0 refits (high floors, exchangeable, little spread)."""
    exchangeable = {"best_match": 0.0, "candidate_sd": 0.0}
    quiet = {"refit_sd": 0.003, "head_sd": 0.005, "layer_offset_sd": (0.002, 0.002)}
    return Scenario(
        name,
        observed,
        null=replace(observed, floors=(0.4, 0.62), **exchangeable),
        content=replace(observed, floors=(0.05, 0.15), cell_sd=(0.02, 0.03)),
        content_null=replace(observed, floors=(0.02, 0.05), cell_sd=(0.02, 0.03), **exchangeable),
        init=replace(
            observed, floors=(0.85, 0.88), cell_sd=(0.01, 0.01), group_sd=(0.005, 0.005), **exchangeable, **quiet
        ),
    )


LARGE_N = 50  # from this many refits the studies simulate 3 heads and 10 groups of 10 prompts (`at_refits`)


def coarser(model: StabilityModel, n_heads: int = 3, n_groups: int = 10) -> StabilityModel:
    """The same prompts in fewer, larger groups (the group-level s.d. shrink with the group size) and fewer heads."""
    prompts = model.n_groups * model.group_size
    shrink = np.sqrt(model.group_size * n_groups / prompts)
    return replace(
        model,
        n_heads=n_heads,
        n_groups=n_groups,
        group_size=prompts // n_groups,
        cell_sd=tuple(sd * shrink for sd in model.cell_sd),
        group_sd=tuple(sd * shrink for sd in model.group_sd),
    )


def at_refits(scenario, n: int):
    """`scenario` (a Scenario or OptimizerPairScenario) as simulated at n refits: `coarser` models from LARGE_N on."""
    if n < LARGE_N:
        return scenario
    if isinstance(scenario, OptimizerPairScenario):
        return replace(scenario, adam=at_refits(scenario.adam, n), adamw=at_refits(scenario.adamw, n))
    kinds = ("observed", "null", "content", "content_null", "init")
    return replace(scenario, **{kind: coarser(getattr(scenario, kind)) for kind in kinds})


# One candidate head per anchor head stands out (trained heads), or none does (positional heads).
SCENARIOS = {
    "clear_best_match": stability_scenario("clear_best_match", StabilityModel()),
    "exchangeable_candidates": stability_scenario("exchangeable_candidates", StabilityModel(best_match=0.0)),
}


def adamw_refits(rng: np.random.Generator, model: StabilityModel, refits: RefitEffects, rho: float) -> RefitEffects:
    """The AdamW member's refits beside `refits` (the same seeds, the other optimizer): effects correlated rho, the
    same head order (the same initial weights)."""
    fresh = draw_refits(rng, model, len(refits.u))
    mix = lambda a, b: rho * a + np.sqrt(1.0 - rho**2) * b  # noqa: E731
    return RefitEffects(mix(refits.u, fresh.u), mix(refits.v, fresh.v), mix(refits.h, fresh.h), refits.order)


@dataclass(frozen=True)
class OptimizerPairScenario:
    """An optimizer pair (Adam and AdamW member), refit s of both from the same seed: each member's study
    populations, how much the members share (refit effects, prompt draws, perplexity noise) and the perplexities'
    AdamW - Adam difference."""

    name: str
    adam: Scenario
    adamw: Scenario
    rho_refits: float = 0.5
    rho_prompts: float = 0.8
    rho_perplexity: float = 0.8
    perplexity: float = 30.0
    perplexity_sd: float = 1.5
    perplexity_difference: float = 0.0
    heavy_tails: bool = False  # perplexity noise Student t with 3 degrees of freedom (unit variance)


KINDS = ("observed", "null", "content", "content_null")


def _members(rng: np.random.Generator, pair: OptimizerPairScenario, n: int, kinds: tuple[str, ...]) -> tuple[dict, ...]:
    """Each member's prompt-group tensors of `kinds`, the members sharing refit effects and prompt draws as
    configured."""
    refits = {"adam": draw_refits(rng, pair.adam.observed, n)}
    refits["adamw"] = adamw_refits(rng, pair.adamw.observed, refits["adam"], pair.rho_refits)
    tensors = {"adam": {}, "adamw": {}}
    for kind in kinds:
        draws = prompt_draws(rng, getattr(pair.adam, kind), n)
        for member, prompts in (("adam", draws), ("adamw", mixed_draws(rng, draws, pair.rho_prompts))):
            model = getattr(getattr(pair, member), kind)
            tensors[member][kind] = simulate_grouped(rng, model, refits[member], prompts)
    return tensors, refits["adam"], refits["adamw"]


def simulate_optimizer_pair(
    rng: np.random.Generator, pair: OptimizerPairScenario, n: int, content: bool = True
) -> dict:
    """One Adam/AdamW study of n seeds: "adam", "adamw" (`GroupedSimilarity`; content False: without the content
    variant), "ppl_adam", "ppl_adamw" (validation perplexities by seed), "refits_adam", "refits_adamw"."""
    from headstab.similarity.prompt_groups import GroupedSimilarity

    tensors, refits_adam, refits_adamw = _members(rng, pair, n, KINDS if content else KINDS[:2])
    model = pair.adam.observed
    sizes = np.full(model.n_groups, model.group_size, dtype=np.int64)
    n_prompts = int(sizes.sum())
    common = {"group_sizes": sizes, "seeds": list(range(1, n + 1)), "partners": np.roll(np.arange(n_prompts), 1)}
    common["lengths"] = np.full(n_prompts, 20, dtype=np.int64)
    members = {}
    for member, effects in (("adam", refits_adam), ("adamw", refits_adamw)):
        arrays = tensors[member]
        entropy = 0.6 - 3.0 * effects.h + rng.normal(scale=0.02, size=effects.h.shape)
        members[member] = GroupedSimilarity(
            observed=arrays["observed"],
            null=arrays["null"],
            content_observed=arrays.get("content"),
            content_null=arrays.get("content_null"),
            entropy=entropy,
            **common,
        )
    draw = (lambda size: rng.standard_t(3, size) / np.sqrt(3.0)) if pair.heavy_tails else rng.standard_normal
    z_adam, z_fresh = draw(n), draw(n)
    z_adamw = pair.rho_perplexity * z_adam + np.sqrt(1.0 - pair.rho_perplexity**2) * z_fresh
    seeds = common["seeds"]
    ppl_adam = pair.perplexity + pair.perplexity_sd * z_adam
    ppl_adamw = pair.perplexity + pair.perplexity_difference + pair.perplexity_sd * z_adamw
    return {
        **members,
        "ppl_adam": pd.Series(ppl_adam, index=seeds),
        "ppl_adamw": pd.Series(ppl_adamw, index=seeds),
        "refits_adam": refits_adam,
        "refits_adamw": refits_adamw,
    }


def one_thread(study):
    """Run `study` with torch on one thread: the bootstrap's batches are small, and threads only contend."""

    def run(rng: np.random.Generator, n: int):
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return study(rng, n)
        finally:
            torch.set_num_threads(threads)

    return run


def graded_layer_similarity(
    rng: np.random.Generator,
    n_refits: int,
    floors: np.ndarray,
    spreads: np.ndarray,
    offset_sds: np.ndarray,
    above_null: np.ndarray,
    n_heads: int = 3,
    n_groups: int = 2,
    refit_sd: float = 0.03,
):
    """A `GroupedSimilarity` of n_refits refits with len(floors) layers whose stability above the null is
    `above_null` [layer]: observed s[g, a, b, l, i, j] = floors[l] + above_null[l] + u[a, l] + u[b, l] + r[a] + r[b]
    + spreads[l] e, null = floors[l] + spreads[l] e', with e, e' symmetric pair blocks (e[a, b, l, i, j] =
    e[b, a, l, j, i]) of independent normals per prompt group, u refit-specific layer offsets (s.d. offset_sds[l],
    mean zero over refits), r refit effects. Observed and null noise share their distribution per layer, so the
    expected best match above the null of layer l is above_null[l] whatever its floor and spread."""
    from headstab.similarity.prompt_groups import GroupedSimilarity

    floors, spreads = np.asarray(floors, dtype=np.float64), np.asarray(spreads, dtype=np.float64)
    n_layers = len(floors)
    shape = (n_groups, n_refits, n_refits, n_layers, n_heads, n_heads)

    def pair_noise() -> np.ndarray:
        noise = rng.normal(size=shape)
        return (noise + noise.transpose(0, 2, 1, 3, 5, 4)) / np.sqrt(2) * spreads[:, None, None]

    offsets = rng.normal(size=(n_refits, n_layers)) * np.asarray(offset_sds) + rng.normal(size=(n_refits, 1)) * refit_sd
    shift = (offsets[:, None, :] + offsets[None, :, :])[..., None, None]
    base = floors[:, None, None]
    observed = base + np.asarray(above_null)[:, None, None] + shift + pair_noise()
    null = base + pair_noise()
    return GroupedSimilarity(
        observed=observed.astype(np.float32),
        null=null.astype(np.float32),
        group_sizes=np.full(n_groups, 10),
        seeds=list(range(1, n_refits + 1)),
        partners=np.array([1, 0]),
        lengths=np.array([5, 5]),
    )


def depth_profile(rng: np.random.Generator, n_layers: int, phi: float, sd: float) -> np.ndarray:
    """[layer] a stationary AR(1) over depth, s.d. sd: neighbouring layers alike (correlation phi), no trend."""
    values = np.empty(n_layers)
    values[0] = rng.normal(scale=sd)
    innovation = sd * np.sqrt(1.0 - phi**2)
    for layer in range(1, n_layers):
        values[layer] = phi * values[layer - 1] + rng.normal(scale=innovation)
    return values


def anchor_layer_values(
    rng: np.random.Generator, layer_mean: np.ndarray, refit_offsets: np.ndarray, pair_sd: float
) -> np.ndarray:
    """[anchor, layer] per-anchor values of a pair statistic: per layer l, the mean over the anchor's N - 1
    pair refits of symmetric pair values layer_mean[l] + offset[a, l] + offset[b, l] + pair noise.

    refit_offsets: [refit, layer] refit-specific layer offsets (some refit's layer is sharper), shared by every
    pair the refit enters, so the anchors' values share their partners.
    """
    n_refits, n_layers = refit_offsets.shape
    values = np.empty((n_refits, n_layers))
    for layer in range(n_layers):
        pairs = symmetric_pair_values(rng, refit_offsets[:, layer], pair_sd)
        values[:, layer] = layer_mean[layer] + pairs.sum(axis=1) / (n_refits - 1)
    return values


def clustered_rows(
    rng: np.random.Generator, n_refits: int, rows_per_refit: int, between: np.ndarray, within: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows that belong to refits: ([row, variable] values, [row] refit index).

    Each row of refit a is u_a + e with u_a ~ N(0, between) shared by the refit's rows (its heads) and
    e ~ N(0, within) its own; between, within: [variable, variable] covariances. The population covariance of
    a row is between + within.
    """
    n_var = len(between)
    shared = rng.multivariate_normal(np.zeros(n_var), between, size=n_refits)
    own = rng.multivariate_normal(np.zeros(n_var), within, size=(n_refits, rows_per_refit))
    values = (shared[:, None, :] + own).reshape(-1, n_var)
    return values, np.repeat(np.arange(n_refits), rows_per_refit)
