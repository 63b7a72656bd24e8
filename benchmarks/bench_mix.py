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
import sys
from collections.abc import Callable
from pathlib import Path

# Measure this checkout, not whatever copy of kvstress happens to be installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._compare import MISS, compare
from kvstress.fuzz._run import parse_mix
from kvstress.fuzz._score import detect
from kvstress.mutants import MUTANTS


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

    def finder(mix: tuple[str, ...]) -> Callable[[type, int], float]:
        def find(pool: type, seed: int) -> float:
            found = detect(pool, budget_s=args.budget, seed=seed, mix=mix)
            return found.elapsed_s if found.detected and found.elapsed_s is not None else MISS

        return find

    compare(pools, seeds, {name: finder(mix) for name, mix in mixes.items()}, slowest=True)


if __name__ == "__main__":
    main()
