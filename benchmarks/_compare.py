"""What the side-by-side benchmarks share: run each variant on each mutant and seed, print a row
per mutant as it finishes, then a summary line per variant."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

MISS = float("inf")
"""A search that found nothing within its budget."""


def compare(
    pools: Sequence[type],
    seeds: Sequence[int],
    variants: Mapping[str, Callable[[type, int], float]],
    *,
    slowest: bool = False,
) -> None:
    """For each pool, each seed, each variant (interleaved, so load falls on all alike): its
    seconds to the find (MISS: none). ``slowest`` adds the slowest run to the summary."""
    times: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    for pool in pools:
        for seed in seeds:
            for name, find in variants.items():
                times[name].setdefault(pool.__qualname__, []).append(find(pool, seed))
        cells = (", ".join(seconds(t) for t in times[name][pool.__qualname__]) for name in variants)
        print(f"{pool.__qualname__:40s} " + "  |  ".join(cells), flush=True)
    print()
    for name in variants:
        runs = [t for per_seed in times[name].values() for t in per_seed]
        medians = [statistics.median(per_seed) for per_seed in times[name].values()]
        worst = f", slowest {seconds(max(runs))} s" if slowest else ""
        print(
            f"{name}: median {seconds(statistics.median(runs))} s{worst}, "
            f"misses {sum(t == MISS for t in runs)} of {len(runs)}, "
            f"sum of per-mutant medians {seconds(sum(medians))} s"
        )


def seconds(value: float) -> str:
    """A cell: seconds to three places, or ``miss``."""
    return "miss" if value == MISS else f"{value:.3f}"
