"""The harness's own speed: executions, operations and scheduling decisions per second, per strategy.

Run from the repository root: ``python benchmarks/bench_harness.py`` (about two minutes). Each
strategy runs alone, as one fuzzing slice of ``SECONDS`` on a correct pool (so nothing stops it
early), threads and asyncio; the two polling designs' controlled executions/s are then printed
against ThreadedBlockPool's, from the same run. Decisions/s counts the controlled schedulers' answers (a
``MetricsScheduler`` around the same scheduler the fuzzer uses). Time to detect, per strategy, on
the planted-bug corpus is ``kvstress mutants --compare`` (its table is in docs/measurements.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout

from kvstress.fuzz import load_target  # noqa: E402
from kvstress.fuzz._slices import STRATEGIES, run_slice, scenario_config  # noqa: E402
from kvstress.scenarios import search  # noqa: E402
from kvstress.schedulers import MetricsScheduler, PCTScheduler, RandomScheduler  # noqa: E402

SECONDS = 3.0
POOLS = (
    "kvstress:ThreadedBlockPool",
    "kvstress.mutants:PollingCasPool",  # the seed's design: a poll with backoff, CAS per block
    "kvstress.mutants:ThreadPollingPool",  # the ordinary-way poll: a lock, a deque, backoff
    "kvstress:AsyncBlockPool",
)
BASELINE = "ThreadedBlockPool"
CONTROLLED = ("delay", "pct", "random")


def decisions_per_second(spec: str, strategy: str) -> float | None:
    """The controlled scheduler's answers per second over one search of ``SECONDS``."""
    if strategy not in ("pct", "random"):
        return None
    inner = PCTScheduler(depth=3, seed=1) if strategy == "pct" else RandomScheduler(seed=1)
    scheduler = MetricsScheduler(inner)
    start = time.perf_counter()
    search(scenario_config(load_target(spec)), scheduler, budget_s=SECONDS)
    return scheduler.metrics.decisions / (time.perf_counter() - start)


def main() -> None:
    print(f"Each strategy alone for {SECONDS:g} s on a correct pool (2 blocks, 3 workers x 5 steps)\n")
    print(f"{'pool':<20} {'strategy':<9} {'executions/s':>13} {'operations/s':>13} {'decisions/s':>12}")
    rates: dict[tuple[str, str], float] = {}
    for spec in POOLS:
        target = load_target(spec)
        for strategy in STRATEGIES:
            start = time.perf_counter()
            result = run_slice(strategy, target, 1, SECONDS)
            took = time.perf_counter() - start
            decisions = decisions_per_second(spec, strategy)
            shown = "-" if decisions is None else f"{decisions:,.0f}"
            # The machine's executions are Hypothesis examples; it does not count operations.
            operations = "-" if strategy == "machine" else f"{result.operations / took:,.0f}"
            name = spec.split(":")[1]
            rates[name, strategy] = result.executions / took
            print(f"{name:<20} {strategy:<9} {result.executions / took:>13,.0f} {operations:>13} {shown:>12}")
    print(f"\nControlled executions/s against {BASELINE}'s, in this run (target for polling: >= 0.75x)")
    print(f"{'pool':<20} " + " ".join(f"{strategy:>9}" for strategy in CONTROLLED))
    for spec in POOLS:
        name = spec.split(":")[1]
        if name == BASELINE or "Async" in name:
            continue
        ratios = (rates[name, strategy] / max(rates[BASELINE, strategy], 1e-9) for strategy in CONTROLLED)
        print(f"{name:<20} " + " ".join(f"{ratio:>8.2f}x" for ratio in ratios))


if __name__ == "__main__":
    main()
