"""Mixes of strategies side by side on the planted-bug corpus, in one run.

Run from the repository root: ``python benchmarks/bench_mix.py [--seeds 0,1,2] [--budget 10]
[--only NAME,...] MIX [MIX ...]``, each MIX a comma-separated ``--strategy`` list (``auto`` is
the default mix). Each mutant is fuzzed with each mix on each seed, the mixes interleaved mutant
by mutant so that load falls on all of them alike; the table gives each mix's search seconds
per seed (``miss``: not found within the budget), then the median over every run, the slowest,
the misses and the sum over mutants of the per-mutant medians. Numbers vary with the machine,
so they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

# Measure this checkout, not whatever copy of kvstress happens to be installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvstress.fuzz._run import parse_mix
from kvstress.fuzz._score import detect
from kvstress.mutants import MUTANTS

MISS = float("inf")


def main() -> None:
    """Parse the arguments, run every mutant under every mix, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mixes", nargs="+", metavar="MIX")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    mixes = {name: parse_mix(name) for name in args.mixes}
    seeds = [int(seed) for seed in args.seeds.split(",")]
    only = {name for name in args.only.split(",") if name}
    pools = [pool for pool in MUTANTS if not only or pool.__qualname__ in only]
    times: dict[str, dict[str, list[float]]] = {name: {} for name in mixes}
    for pool in pools:
        for seed in seeds:
            for name, mix in mixes.items():
                found = detect(pool, budget_s=args.budget, seed=seed, mix=mix)
                elapsed = found.elapsed_s if found.detected and found.elapsed_s is not None else MISS
                times[name].setdefault(pool.__qualname__, []).append(elapsed)
        cells = (f"{', '.join(_seconds(t) for t in times[name][pool.__qualname__])}" for name in mixes)
        print(f"{pool.__qualname__:40s} " + "  |  ".join(cells), flush=True)
    print()
    for name in mixes:
        runs = [t for per_seed in times[name].values() for t in per_seed]
        medians = [statistics.median(per_seed) for per_seed in times[name].values()]
        print(
            f"{name}: median {_seconds(statistics.median(runs))} s, slowest {_seconds(max(runs))} s, "
            f"misses {sum(t == MISS for t in runs)} of {len(runs)}, "
            f"sum of per-mutant medians {_seconds(sum(medians))} s"
        )


def _seconds(value: float) -> str:
    return "miss" if value == MISS else f"{value:.3f}"


if __name__ == "__main__":
    main()
