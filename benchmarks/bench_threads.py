"""The thread baton and the controlled scenarios: how fast they run, and how fast they find bugs.

Run from the repository root: ``python benchmarks/bench_threads.py`` (about a minute).

1. Baton: two controlled threads each call ``time.sleep(0)`` (a scheduling point) 20,000
   times; switches/s counts handoffs of the baton between OS threads, decisions/s the
   scheduler's answers. Target: 10,000 switches/s.
2. Scenario executions/s per strategy, threads (ThreadedBlockPool) and asyncio (AsyncBlockPool):
   a whole execution is generate + build + 3 workers x 5 steps + checks + linearizability.
3. Time to detect the two classic races of a tiny pool (``tests/pools/tiny.py``), median over
   seeds: controlled PCT and random, free-running threads with noise at the pool's lines (the
   stress mode), and plain free-running threads (what a test suite without kvstress does).
   "-" means not found within the budget. Numbers vary with the machine: printed, never asserted.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout
sys.path.insert(0, str(ROOT / "tests"))  # the tiny pools

from pools.tiny import TinyCheckThenPollPool, TinyResetAfterOfferPool  # noqa: E402

from kvstress import AsyncBlockPool, ThreadedBlockPool  # noqa: E402
from kvstress.controlled._baton import ThreadController  # noqa: E402
from kvstress.controlled._patch import cooperative, resolve_modules  # noqa: E402
from kvstress.controlled._threads import spawn  # noqa: E402
from kvstress.scenarios import ScenarioConfig, search, stress  # noqa: E402
from kvstress.schedulers import DFSScheduler, PCTScheduler, RandomScheduler, Scheduler  # noqa: E402

ROUNDS = 20_000
SEEDS = 7
DETECT_BUDGET_S = 20.0


def ping_pong() -> None:
    """Two threads yielding in turn: the baton's fastest path."""

    def worker() -> None:
        for _ in range(ROUNDS):
            time.sleep(0)

    threads = [spawn(worker), spawn(worker)]
    for thread in threads:
        thread.join()


def bench_baton() -> None:
    print(f"1. Baton: 2 threads x {ROUNDS:,} sleep(0)")
    print(f"   {'strategy':<14} {'switches/s':>12} {'decisions/s':>12}")
    strategies: list[tuple[str, Callable[[], Scheduler]]] = [
        ("random", lambda: RandomScheduler(seed=1)),
        ("pct (d=3)", lambda: PCTScheduler(depth=3, seed=1)),
        ("dfs (bound 2)", lambda: DFSScheduler(preemption_bound=2)),
    ]
    modules = resolve_modules([__name__])
    for name, make in strategies:
        best = (0.0, 0.0)
        for _ in range(3):
            controller = ThreadController(make(), max_steps=10 * ROUNDS)
            with cooperative(modules):
                start = time.perf_counter()
                controller.run(ping_pong)
                took = time.perf_counter() - start
            best = max(best, (controller.switches / took, controller.decisions / took))
        print(f"   {name:<14} {best[0]:>12,.0f} {best[1]:>12,.0f}")


def bench_executions() -> None:
    print("\n2. Scenario executions/s (3 workers x 5 steps, 2 blocks, all checks)")
    print(f"   {'pool':<20} {'random':>10} {'pct (d=3)':>10}")
    for factory, is_async in ((ThreadedBlockPool, False), (AsyncBlockPool, True)):
        rates = []
        for make in (lambda: RandomScheduler(seed=2), lambda: PCTScheduler(depth=3, seed=2)):
            result = search(ScenarioConfig(factory, is_async), make(), budget_s=4.0)
            rates.append(result.executions / result.elapsed_s)
        print(f"   {factory.__name__:<20} {rates[0]:>10,.0f} {rates[1]:>10,.0f}")


def detect(run: Callable[[int], tuple[Any, int, float]]) -> str:
    found = [run(seed) for seed in range(SEEDS)]
    hits = [(executions, seconds) for failure, executions, seconds in found if failure is not None]
    if not hits:
        return f"{'-':>22}"
    executions = statistics.median(e for e, _ in hits)
    seconds = statistics.median(s for _, s in hits)
    return f"{executions:>7.0f} ex {seconds * 1000:>7.1f} ms {len(hits)}/{SEEDS}"


def bench_detection() -> None:
    print(f"\n3. Time to detect, median over {SEEDS} seeds (executions, search time, seeds that found it)")
    print(f"   {'strategy':<28} {'reset-after-offer':>22} {'check-then-poll':>22}")
    rows: list[tuple[str, Callable[[type, int], tuple[Any, int, float]]]] = [
        ("controlled pct (d=3)", lambda f, s: _search(f, PCTScheduler(depth=3, seed=s))),
        ("controlled random", lambda f, s: _search(f, RandomScheduler(seed=s))),
        ("free-running + noise", lambda f, s: _stress(f, s, 0.05, 1e-6)),
        ("free-running, plain", lambda f, s: _stress(f, s, 0.0, None)),
    ]
    for name, run in rows:
        cells = [
            detect(functools.partial(_seeded, run, factory))
            for factory in (TinyResetAfterOfferPool, TinyCheckThenPollPool)
        ]
        print(f"   {name:<28} {cells[0]} {cells[1]}")


def _seeded(
    run: Callable[[type, int], tuple[Any, int, float]], factory: type, seed: int
) -> tuple[Any, int, float]:
    return run(factory, seed)


def _search(factory: type, scheduler: Scheduler) -> tuple[Any, int, float]:
    result = search(ScenarioConfig(factory, False), scheduler, budget_s=DETECT_BUDGET_S, shrink=False)
    return result.failure, result.executions, result.elapsed_s


def _stress(factory: type, seed: int, noise: float, interval: float | None) -> tuple[Any, int, float]:
    result = stress(
        ScenarioConfig(factory, False),
        seed=seed * 1000,
        budget_s=DETECT_BUDGET_S / SEEDS,
        yield_probability=noise,
        replays=0,
        switch_interval=interval,
    )
    return result.failure, result.executions, result.elapsed_s


if __name__ == "__main__":
    bench_baton()
    bench_executions()
    bench_detection()
