"""Seed designs (docs/beyond_the_paper.md): the paper's one seed per refit, or a grid of init seed x data-order seed.

In the paper a refit's seed sets both its initial weights and the order of its training windows. An
architecture with `seed_grid: {init_seeds: [...], data_seeds: [...]}` instead has one refit per pair,
named `{init}-{data}` (files under `seed{init}-{data}/`): its weights are drawn with the init seed and its
windows shuffled with the data seed. A plain refit `{seed}` is the pair (seed, seed), so its name, weights
and data order are what they always were. A grid cell listed in `seed_grid.ulp_twins` also has a twin named
`{init}-{data}-ulp`: the same seeds, its initial weights moved by one ulp (`headstab.training.perturbation`),
the floor of the decomposition (pairs that share both seeds).

An architecture with `data_order: shared` keeps one data order for all its refits: every refit's windows are
shuffled with SHARED_DATA_SEED, so its refits differ in their initialisation alone (the authors' GPT-2 script,
which seeds torch with 0 before every shuffled DataLoader).

The head types' held-out initialisations (`held_out_seeds`) are further init seeds, disjoint from every refit's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "BLOCK_WILDCARD",
    "DATA_ORDERS",
    "GRID_REFIT",
    "SEED_WILDCARD",
    "SHARED_DATA_SEED",
    "ULP_SUFFIX",
    "block_name",
    "grid_refits",
    "held_out_seeds",
    "refit_blocks",
    "refit_name",
    "refit_seeds",
    "train_blocks",
    "training_seeds",
    "ulp_perturbed",
    "unperturbed",
]

ULP_SUFFIX = "-ulp"
GRID_REFIT = re.compile(r"^(\d+)-(\d+)(-ulp)?$")
DATA_ORDERS = ("per_seed", "shared")
# The data seed of every refit of an architecture with data_order shared (the authors' torch.manual_seed(0)).
SHARED_DATA_SEED = 0
# The {seed} wildcard: a paper refit's seed, a grid refit's init-data pair, or its one-ulp twin.
SEED_WILDCARD = r"\d+(-\d+(-ulp)?)?"
# The {block} wildcard of a train job: the refits it trains together, e.g. seeds1_2_3_4 or seeds1-2_1-3.
BLOCK_WILDCARD = rf"seeds{SEED_WILDCARD}(_{SEED_WILDCARD})*"


def grid_refits(init_seeds: Iterable[int], data_seeds: Iterable[int], ulp_twins: Iterable[str] = ()) -> tuple[str, ...]:
    """Refit names of the grid, init-major: ('1-1', '1-2', ..., '3-3'), then the one-ulp twin '{cell}-ulp' of each
    cell in ulp_twins (cells named 'init-data'), in the grid's order."""
    data_seeds = list(data_seeds)
    cells = tuple(f"{int(init)}-{int(data)}" for init in init_seeds for data in data_seeds)
    twins = set(map(str, ulp_twins))
    unknown = sorted(twins - set(cells))
    if unknown:
        raise ValueError(f"ulp_twins {unknown} are not cells of the grid {list(cells)}")
    return cells + tuple(f"{cell}{ULP_SUFFIX}" for cell in cells if cell in twins)


def refit_seeds(name: int | str) -> tuple[int, int]:
    """(init seed, data-order seed) of a refit named `name`: 7 or '7' -> (7, 7); '1-2' and '1-2-ulp' -> (1, 2)."""
    text = str(name)
    if text.isdigit():
        return int(text), int(text)
    match = GRID_REFIT.match(text)
    if match is None:
        raise ValueError(
            f"refit name {name!r} is neither a seed (e.g. 3), an init-data pair (e.g. 1-2) nor its one-ulp twin (1-2-ulp)"
        )
    return int(match.group(1)), int(match.group(2))


def refit_name(wildcard: str) -> int | str:
    """The refit as its spec lists it: an int for a paper seed, the 'init-data' string for a grid refit ('init-data-ulp'
    for its one-ulp twin)."""
    init, data = refit_seeds(wildcard)
    return f"{init}-{data}{ULP_SUFFIX if ulp_perturbed(wildcard) else ''}" if GRID_REFIT.match(str(wildcard)) else init


def training_seeds(name: int | str, data_order: str) -> tuple[int, int]:
    """(init seed, data-order seed) that refit `name` trains with: `refit_seeds`, except that data_order
    "shared" gives every refit SHARED_DATA_SEED. A seed-grid refit names its own data seed, so it cannot share one."""
    if data_order not in DATA_ORDERS:
        raise ValueError(f"data_order must be per_seed or shared; got {data_order!r}")
    init_seed, data_seed = refit_seeds(name)
    if data_order == "per_seed":
        return init_seed, data_seed
    if GRID_REFIT.match(str(name)):
        raise ValueError(f"refit {name!r} of a seed grid names its own data seed; data_order shared does not apply")
    return init_seed, SHARED_DATA_SEED


def ulp_perturbed(name: int | str) -> bool:
    """Whether refit `name` is a grid cell's one-ulp twin ('1-2-ulp')."""
    match = GRID_REFIT.match(str(name))
    return match is not None and match.group(3) is not None


def unperturbed(name: int | str) -> int | str:
    """The grid cell a one-ulp twin perturbs ('1-2-ulp' -> '1-2'); any other refit is itself."""
    return str(name)[: -len(ULP_SUFFIX)] if ulp_perturbed(name) else name


def block_name(refits: Iterable[int | str]) -> str:
    """The name of a train job's block of refits: (1, 2, 3) -> 'seeds1_2_3'; ('1-2', '1-3') -> 'seeds1-2_1-3'."""
    return "seeds" + "_".join(str(refit) for refit in refits)


def refit_blocks(blocks: dict[str, list[int | str]]) -> dict[str, str]:
    """{refit name as its wildcard reads: the block that holds it} of `train_blocks`' blocks."""
    return {str(refit): block for block, refits in blocks.items() for refit in refits}


def train_blocks(refits: Iterable[int | str], seeds_per_job: int) -> dict[str, list[int | str]]:
    """{block name: its refits}: `refits` in order, `seeds_per_job` at a time (the last block may be smaller).

    A block is an execution grouping only (of a train job, or of a cache job): a refit's weights and activations do
    not depend on the block it is in."""
    if seeds_per_job < 1:
        raise ValueError(f"seeds_per_job must be at least 1, not {seeds_per_job}")
    refits = list(refits)
    chunks = [refits[start : start + seeds_per_job] for start in range(0, len(refits), seeds_per_job)]
    return {block_name(chunk): chunk for chunk in chunks}


def held_out_seeds(first: int, count: int, refit_seeds: Mapping[str, Iterable[int]]) -> list[int]:
    """The held-out initialisations' seeds first, ..., first + count - 1.

    refit_seeds: {architecture: init seeds of its refits}. Raises ValueError naming config key
    head_types.held_out_first_seed when a held-out seed is some refit's seed (its step 0 would calibrate
    the threshold it is then compared with), or when count < 2.
    """
    if count < 2:
        raise ValueError(f"config key 'head_types.held_out_draws' must be at least 2; got {count}")
    seeds = list(range(first, first + count))
    clashes = {arch: sorted(set(seeds) & {int(s) for s in used}) for arch, used in refit_seeds.items()}
    clashes = {arch: shared for arch, shared in clashes.items() if shared}
    if clashes:
        largest = max(int(s) for used in refit_seeds.values() for s in used)
        raise ValueError(
            f"config key 'head_types.held_out_first_seed': the held-out initialisations (seeds {first}-"
            f"{first + count - 1}) would reuse the seeds of refits {clashes}, which they are compared with; "
            f"set it above {largest}"
        )
    return seeds
