"""How fast the controlled asyncio loop decides, per strategy, and how fast it finds a real bug.

Run from the repository root: ``python benchmarks/bench_schedulers.py`` (about 15 s).

Decisions are the times a scheduler is asked (two or more tasks ready); the workload is 8 tasks
that each yield 5,000 times, so nearly every step is a decision. The target is 50,000
decisions/s. The second table runs a condensed copy of the async reset-after-offer program of
``tests/test_controlled_explore.py`` until each strategy finds the bug, plain asyncio for
comparison, and a bounded search over the fixed pool. Best of three runs each; numbers vary
with the machine, so they are printed, never asserted.

Measured on the 2-core development machine (Python 3.11.7, shared with other jobs, hence the
ranges over four runs): random 129k-210k, PCT (d=3) 154k-227k, DFS (bound 2) 151k-191k, replay
179k-215k, metrics(random) 101k-208k decisions/s; stock asyncio 385k-771k steps/s. The bug:
random after 1 execution (0.3 ms), PCT (d=2) after 6 (1.4-2.2 ms), DFS (bound 1) after 11
(2.5 ms); stock asyncio, 0 failures in 1,000 runs (160-350 ms). DFS (bound 2) proves the fixed
pool clean over 10,392 interleavings in 2.4 s.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

# Measure this checkout, not whatever copy of kvstress happens to be installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvstress.controlled import ControlledEventLoop, explore
from kvstress.schedulers import (
    DFSScheduler,
    MetricsScheduler,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Scheduler,
)

TASKS, YIELDS, REPEATS = 8, 5_000, 3


async def yielders() -> None:
    """TASKS tasks that each yield YIELDS times."""

    async def worker() -> None:
        for _ in range(YIELDS):
            await asyncio.sleep(0)

    await asyncio.gather(*(worker() for _ in range(TASKS)))


def decisions_per_second(make: Callable[[], Scheduler]) -> float:
    """Best of REPEATS: decisions made by one execution of ``yielders``, per wall-clock second."""
    best = 0.0
    for _ in range(REPEATS):
        loop = ControlledEventLoop(make())
        try:
            began = time.perf_counter()
            loop.run_until_complete(yielders())
            elapsed = time.perf_counter() - began
        finally:
            loop.close()
        best = max(best, loop.decisions / elapsed)
    return best


def plain_steps_per_second() -> float:
    """Best of REPEATS: the stock asyncio loop's task steps per second on the same workload."""
    best = 0.0
    for _ in range(REPEATS):
        began = time.perf_counter()
        asyncio.run(yielders())
        best = max(best, TASKS * YIELDS / (time.perf_counter() - began))
    return best


def recorded_random_schedule() -> ReplayScheduler:
    """A replay of one random execution of ``yielders``."""
    scheduler = RandomScheduler(seed=1)
    loop = ControlledEventLoop(scheduler)
    try:
        loop.run_until_complete(yielders())
    finally:
        loop.close()
    return ReplayScheduler(scheduler.schedule())


class DirtyBlock(AssertionError):
    """A block was handed out still holding a previous tenant's data."""


# The reset-after-offer pool of tests/test_controlled_explore.py, condensed.
def reset_after_offer_program(*, fixed: bool = False) -> Callable[[], Coroutine[Any, Any, None]]:
    """Three tenants, two blocks, two rounds; release offers a block, awaits, then zeroes it.

    ``fixed`` zeroes the block before offering it instead.
    """

    async def main() -> None:
        free, data, parked = deque([0, 1]), [0, 0], deque[asyncio.Event]()

        async def tenant(me: int) -> None:
            for _ in range(2):
                while not free:
                    parked.append(asyncio.Event())
                    await parked[-1].wait()
                block = free.popleft()
                if data[block]:
                    raise DirtyBlock(f"block {block} handed out holding tenant {data[block]}'s data")
                data[block] = me
                await asyncio.sleep(0)
                if fixed:
                    data[block] = 0
                free.append(block)  # the bug: offered before it is zeroed, across an await
                await asyncio.sleep(0)
                data[block] = 0
                if parked:
                    parked.popleft().set()
                await asyncio.sleep(0)

        async with asyncio.TaskGroup() as group:
            for me in (1, 2, 3):
                group.create_task(tenant(me))

    return main


def time_to_find(make: Callable[[], Scheduler]) -> tuple[int, float]:
    """Executions and wall-clock milliseconds until the scheduler finds the bug (best of REPEATS)."""
    best = (0, float("inf"))
    for _ in range(REPEATS):
        began = time.perf_counter()
        found = explore(reset_after_offer_program(), make(), max_executions=10_000)
        elapsed = (time.perf_counter() - began) * 1000
        if not isinstance(found.failure, ExceptionGroup) or not found.failure.subgroup(DirtyBlock):
            return found.executions, float("nan")
        best = min(best, (found.executions, elapsed), key=lambda pair: pair[1])
    return best


def plain_asyncio_runs(runs: int) -> tuple[int, float]:
    """Failures in ``runs`` runs of the bug program on the stock loop, and the milliseconds spent."""
    failures, began = 0, time.perf_counter()
    for _ in range(runs):
        try:
            asyncio.run(reset_after_offer_program()())
        except ExceptionGroup as failure:
            failures += failure.subgroup(DirtyBlock) is not None
    return failures, (time.perf_counter() - began) * 1000


def main() -> None:
    """Print both tables."""
    print(f"Controlled asyncio loop: {TASKS} tasks x {YIELDS:,} yields, best of {REPEATS}")
    print(f"{'strategy':<28}{'decisions/s':>14}")
    strategies: list[tuple[str, Callable[[], Scheduler]]] = [
        ("random", lambda: RandomScheduler(seed=1)),
        ("pct (d=3)", lambda: PCTScheduler(depth=3, seed=1, k=TASKS * YIELDS)),
        ("dfs (preemption bound 2)", lambda: DFSScheduler(preemption_bound=2)),
        ("replay", recorded_random_schedule),
        ("metrics(random)", lambda: MetricsScheduler(RandomScheduler(seed=1))),
    ]
    for name, make in strategies:
        print(f"{name:<28}{decisions_per_second(make):>14,.0f}")
    print(f"{'(stock asyncio, steps/s)':<28}{plain_steps_per_second():>14,.0f}")

    print("\nFinding the async reset-after-offer bug (3 tenants, 2 blocks, 2 rounds)")
    print(f"{'strategy':<28}{'executions':>12}{'ms':>10}")
    finders: list[tuple[str, Callable[[], Scheduler]]] = [
        ("random", lambda: RandomScheduler(seed=1)),
        ("pct (d=2)", lambda: PCTScheduler(depth=2, seed=1)),
        ("dfs (preemption bound 1)", lambda: DFSScheduler(preemption_bound=1)),
    ]
    for name, make in finders:
        executions, ms = time_to_find(make)
        print(f"{name:<28}{executions:>12,}{ms:>10.1f}")
    failures, ms = plain_asyncio_runs(1_000)
    print(f"{'stock asyncio':<28}{'1,000 runs':>12}{ms:>10.1f}  ({failures} failures)")

    began = time.perf_counter()
    proof = explore(reset_after_offer_program(fixed=True), DFSScheduler(2), max_executions=100_000)
    ms = (time.perf_counter() - began) * 1000
    verdict = "clean, search exhausted" if proof.exhausted and not proof.failed else "NOT PROVEN"
    print(f"{'dfs bound 2, fixed pool':<28}{proof.executions:>12,}{ms:>10.1f}  ({verdict})")


if __name__ == "__main__":
    main()
