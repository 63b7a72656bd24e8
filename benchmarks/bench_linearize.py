"""How long the linearizability checker takes on correct histories of 1,000 to 100,000 operations.

Run from the repository root: ``python -m benchmarks.bench_linearize``. It prints measured
numbers and asserts nothing: one line per size, worker count and pool size (the median of a few
seeded runs, with how many acquires in the first of them answered None on an empty pool or were
cancelled), then the line the issue's target is judged on. Histories come from a correct pool
simulated one operation at a time, each operation's interval stretched at random around the
instant it took effect, so the workers overlap as they do in the harness.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from kvstress import Operation
from kvstress.linearize import check_history

SIZES = (1_000, 10_000, 100_000)
SHAPES = ((2, 8), (4, 8), (2, 64), (4, 64))  # (workers, blocks)
REPEATS = {1_000: 5, 10_000: 3, 100_000: 1}
TARGET_OPS, TARGET_S = 10_000, 1.0


@dataclass
class _Pool:
    """A correct pool driven by ``workers`` holders, one operation at a time."""

    rng: random.Random
    blocks: int
    workers: int
    refcounts: list[int] = field(default_factory=list)
    held: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.refcounts = [0] * self.blocks
        self.held = [[] for _ in range(self.workers)]

    def step(self, w: int) -> tuple[str, dict[str, Any], Any, str]:
        """One operation by worker ``w``: (name, args, result, outcome)."""
        rng, mine = self.rng, self.held[w]
        roll = rng.random()
        if roll < 0.01:
            return "acquire", {"timeout": 0.005}, "cancelled", "info"  # a correct pool takes nothing
        if mine and roll < 0.12:
            return "mark_in_use", {"block": rng.choice(mine)}, None, "ok"
        if mine and roll < 0.2:
            block = rng.choice(mine)
            self.refcounts[block] += 1
            self.held[rng.randrange(self.workers)].append(block)
            return "retain", {"block": block, "for": "w"}, None, "ok"
        # Hold a few blocks each: a small pool runs dry now and then, a large one never.
        if mine and (roll < 0.6 or len(mine) > self.blocks // self.workers):
            block = mine.pop(rng.randrange(len(mine)))
            self.refcounts[block] -= 1
            return "release", {"block": block}, self.refcounts[block] == 0, "ok"
        free = [b for b, rc in enumerate(self.refcounts) if rc == 0]
        if not free:
            return "acquire", {"timeout": 0.0}, None, "info"
        block = rng.choice(free)
        self.refcounts[block] = 1
        mine.append(block)
        return "acquire", {"timeout": 0.0}, block, "ok"


def history(count: int, workers: int, blocks: int, seed: int) -> list[Operation]:
    """A correct history: operation k takes effect at time k, inside its own interval."""
    rng = random.Random(seed)
    pool = _Pool(rng, blocks, workers)
    steps = [(w, *pool.step(w)) for w in (rng.randrange(workers) for _ in range(count))]
    following: dict[int, float] = {}
    next_of = [0.0] * count
    for k in range(count - 1, -1, -1):
        next_of[k] = following.get(steps[k][0], k + 3.0)
        following[steps[k][0]] = float(k)
    ops, last_end = [], [0.0] * workers
    for k, (w, name, args, result, outcome) in enumerate(steps):
        start = rng.uniform(last_end[w], float(k))
        end = rng.uniform(float(k), next_of[k])
        last_end[w] = end
        ops.append(Operation(k, f"w{w}", name, args, start, end, outcome, result))
    return ops


def measure(count: int, workers: int, blocks: int) -> tuple[float, str, int, int]:
    """Median seconds to check, the verdicts seen, and the first history's None and cancelled
    acquires."""
    times, verdicts = [], set()
    first = history(count, workers, blocks, 0)
    empty = sum(op.name == "acquire" and op.result is None for op in first)
    cancelled = sum(op.result == "cancelled" for op in first)
    for seed in range(REPEATS[count]):
        ops = first if seed == 0 else history(count, workers, blocks, seed)
        begin = time.perf_counter()
        result = check_history(ops, blocks, time_limit=120.0)
        times.append(time.perf_counter() - begin)
        verdicts.add(result.status)
    return statistics.median(times), ",".join(sorted(verdicts)), empty, cancelled


def main() -> None:
    """Print the table and the target line."""
    header = f"{'ops':>8} {'workers':>7} {'blocks':>6} {'None':>6} {'cancel':>6}"
    print(f"{header} {'seconds':>8} {'ops/s':>9}  verdict")
    at_target = []
    for count in SIZES:
        for workers, blocks in SHAPES:
            seconds, verdict, empty, cancelled = measure(count, workers, blocks)
            shape = f"{count:>8,} {workers:>7} {blocks:>6} {empty:>6} {cancelled:>6}"
            print(f"{shape} {seconds:>8.3f} {count / seconds:>9,.0f}  {verdict}")
            sys.stdout.flush()
            if count == TARGET_OPS:
                at_target.append(seconds)
    slowest = max(at_target)
    print(f"{TARGET_OPS:,} ops: {slowest:.3f} s (target < {TARGET_S:g} s)  [slowest shape, median of runs]")


if __name__ == "__main__":
    main()
