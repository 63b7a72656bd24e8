"""Random search with and without timer firing, side by side on the thread mutants, in one run.

Run from the repository root: ``python benchmarks/bench_timers.py [--seeds 0,1,2,3,4]
[--budget 5] [--only NAME,...]``. Each threaded mutant is searched by the random strategy alone
(controlled threads, the fuzzer's scenario shape) twice per seed, interleaved: once as shipped
(a sleeper due within ``FIRE_HORIZON`` is a choice: its timer may fire while others are
runnable) and once with that switched off (time moves only when every thread is blocked). The
table gives seconds to the first failure with an expected id (``miss``: none within the budget),
then each variant's median, misses and sum of per-mutant medians. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

# Measure this checkout, not whatever copy of kvstress happens to be installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._compare import MISS, compare
from kvstress.fuzz._score import expected_of
from kvstress.mutants import MUTANTS
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import RandomScheduler


class NoTimersRandomScheduler(RandomScheduler):
    """The random strategy as it was before timer firing."""

    fires_timers = False


def time_to_find(pool: type, scheduler: RandomScheduler, budget: float) -> float:
    """Seconds of search until a failure with one of the mutant's ids; MISS if none in time."""
    config = ScenarioConfig(pool, is_async=False)
    start = time.perf_counter()
    while (left := budget - (time.perf_counter() - start)) > 0:
        result = search(config, scheduler, budget_s=left, shrink=False)
        if result.failure is None:
            return MISS
        if result.failure.violation.invariant in expected_of(pool):
            return time.perf_counter() - start
    return MISS


def main() -> None:
    """Parse the arguments, search every threaded mutant both ways, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--budget", type=float, default=5.0)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    only = {name for name in args.only.split(",") if name}
    pools = [
        pool
        for pool in MUTANTS
        if not inspect.iscoroutinefunction(pool.acquire) and (not only or pool.__qualname__ in only)
    ]
    variants = {"timers": RandomScheduler, "no timers": NoTimersRandomScheduler}
    print(f"{'mutant':40s} " + "  |  ".join(variants), flush=True)
    compare(
        pools,
        seeds,
        {
            name: lambda pool, seed, cls=cls: time_to_find(pool, cls(seed=seed), args.budget)
            for name, cls in variants.items()
        },
    )


if __name__ == "__main__":
    main()
