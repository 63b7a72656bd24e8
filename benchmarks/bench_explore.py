"""How fast kvstress.explore runs schedules, and how fast it finds the example's planted bugs.

Run from the repository root: ``python benchmarks/bench_explore.py`` (about a minute).

First table: two tests of about 100 awaits, explored for SCHEDULES schedules per strategy; the
target is 200 schedules/s. ``counters``: 4 tasks that each bump a lock-protected counter 25
times (plain asyncio, 100 awaits). ``tenants``: 4 tasks that each take a block of an audited
``AsyncBlockPool`` 12 times, write it, yield and release it (96 awaits of their own, each
acquire and release checked by the audit). ``asyncio.run`` of the same test on the stock loop
is the comparison: what one plain run costs. Best of REPEATS.

Second table: for each planted bug of ``examples/batching`` and seeds 0-4, the schedules and
seconds ``kvstress.explore`` (strategy ``random``, as the example's tests use) took to find it;
the target is 10 s per seed. Then the correct loop's schedules/s over 200 schedules.

Numbers vary with the machine, so they are printed, never asserted.

Measured on the 2-core development machine, shared with other jobs (load average 5), over four
runs: counters 157-619 schedules/s (pct) and 184-474 (random), with plain asyncio.run at 216-687
runs/s, so explore runs at 0.7-0.9 times the speed of one plain run; tenants 68-93 schedules/s
beside 98-223 plain runs/s (the audit's checks are most of a run). Each planted bug took 1 to 13
schedules (at most 0.38 s) on each of seeds 0-4; the correct loop ran 35-71 schedules/s.
Two runs on 2026-12-02 at load average about 1: counters 684-911 schedules/s beside 767-1,049
plain runs/s, tenants 245-321 beside 357-373.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

# Measure this checkout, not whatever copy of kvstress happens to be installed.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "batching"))

import kvstress  # noqa: E402

TASKS, ROUNDS, SCHEDULES, REPEATS, SEEDS = 4, 12, 400, 3, range(5)


async def counters() -> None:
    """TASKS tasks bump a shared counter 25 times each under an asyncio.Lock, yielding inside."""
    lock, counter = asyncio.Lock(), [0]

    async def bump() -> None:
        for _ in range(25):
            async with lock:
                seen = counter[0]
                await asyncio.sleep(0)
                counter[0] = seen + 1

    await asyncio.gather(*(bump() for _ in range(TASKS)))
    assert counter[0] == TASKS * 25


async def tenants() -> None:
    """TASKS tasks share a 2-block audited pool, each taking a block ROUNDS times."""
    async with kvstress.audit(kvstress.AsyncBlockPool(2, (4,))) as pool:

        async def tenant(mark: int) -> None:
            for _ in range(ROUNDS):
                block = await pool.acquire()
                block.data.fill_(mark)
                await asyncio.sleep(0)
                await pool.release(block)

        await asyncio.gather(*(tenant(mark) for mark in range(1, TASKS + 1)))


def schedules_per_second(test: Callable[[], Coroutine[Any, Any, None]], strategy: str) -> float:
    """Best of REPEATS: schedules of ``test`` explored per wall-clock second."""
    best = 0.0
    for seed in range(REPEATS):
        start = time.perf_counter()
        explored = kvstress.explore(test, schedules=SCHEDULES, strategy=strategy, seed=seed)
        best = max(best, explored.schedules / (time.perf_counter() - start))
    return best


def plain_runs_per_second(test: Callable[[], Coroutine[Any, Any, None]]) -> float:
    """Best of REPEATS: asyncio.run(test()) on the stock loop, runs per second."""
    best = 0.0
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(SCHEDULES // 4):
            asyncio.run(test())
        best = max(best, (SCHEDULES // 4) / (time.perf_counter() - start))
    return best


def time_to_find(engine_type: type, seed: int) -> tuple[int, float, str]:
    """Schedules and seconds until explore finds the bug of ``engine_type``, and its invariant."""
    from traffic import serve

    start = time.perf_counter()
    try:
        kvstress.explore(functools.partial(serve, engine_type), schedules=5000, strategy="random", seed=seed)
    except kvstress.InvariantViolation as found:
        note = found.__notes__[-1]
        runs = int(note.split("schedule ")[1].split(" of")[0])
        return runs, time.perf_counter() - start, found.invariant
    return -1, time.perf_counter() - start, "not found in 5000"


def main() -> None:
    """Print both tables."""
    print(f"tests of about 100 awaits, {SCHEDULES} schedules, best of {REPEATS} (target 200 schedules/s)")
    print(f"  {'':<10}{'explore pct':>18}{'explore random':>18}{'plain asyncio.run':>20}")
    for test in (counters, tenants):
        pct, rnd = (schedules_per_second(test, strategy) for strategy in ("pct", "random"))
        plain = plain_runs_per_second(test)
        print(f"  {test.__name__:<10}{pct:12.0f} sch/s{rnd:12.0f} sch/s{plain:13.0f} runs/s")
    from buggy import BUGGY
    from engine import Engine
    from traffic import serve

    print("examples/batching: planted bugs, strategy random (target: found within 10 s)")
    for engine_type in BUGGY:
        found = [time_to_find(engine_type, seed) for seed in SEEDS]
        cells = ", ".join(f"{runs} ({seconds:.2f} s)" for runs, seconds, _ in found)
        print(f"  {engine_type.__name__:<24} {found[0][2]:<15} seeds 0-4: {cells}")
    start = time.perf_counter()
    explored = kvstress.explore(functools.partial(serve, Engine), schedules=200, strategy="random", seed=7)
    rate = explored.schedules / (time.perf_counter() - start)
    print(f"  correct loop: {explored.schedules} schedules clean, {rate:.0f} schedules/s")


if __name__ == "__main__":
    main()
