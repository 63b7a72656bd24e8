"""What ``kvstress.audit`` costs: an audited pool against the same pool bare, measured in one run.

Run from the repository root: ``python benchmarks/bench_audit.py [--pairs N]`` (about 20 s).
Times are CPU time (of the thread; of the process for the contended row), so that other
processes on a shared machine move them less. Each row is the best of a few repeats, in
microseconds per pair (acquire + release, the reset
included), bare and audited side by side, and their ratio: the target is an audited pair at most
2x a bare one. Rows: one thread on a 2 KiB block and on a 64 KiB block (the audit reads the
block's memory at acquire and at release, so its cost grows with the block), the holder writing
the block between the two (what a request does), without acquire stacks (``stack_limit=0``),
four threads contending, and async on asyncio.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout

import kvstress  # noqa: E402

REPEATS = 3
SMALL = (2, 2, 16, 2, 8)  # the tiny card's block: 2 KiB, so the per-call costs show
LARGE = (2, 16, 8, 64)  # 64 KiB


def pairs_threaded(pool: Any, pairs: int) -> float:
    """Seconds for ``pairs`` acquire + release pairs on one thread."""
    acquire, release = pool.acquire, pool.release
    start = time.thread_time()
    for _ in range(pairs):
        release(acquire(0))
    return time.thread_time() - start


def pairs_filled(pool: Any, pairs: int) -> float:
    """As ``pairs_threaded``, the holder filling the block between acquire and release (as a
    request writes its K/V): the pair as a serving loop makes it."""
    acquire, release = pool.acquire, pool.release
    start = time.thread_time()
    for _ in range(pairs):
        block = acquire(0)
        block.data.fill_(1.0)
        release(block)
    return time.thread_time() - start


def pairs_contended(pool: Any, pairs: int, threads: int = 4) -> float:
    """Seconds for ``pairs`` pairs split over ``threads`` threads (each may wait for a block)."""
    each = pairs // threads

    def body() -> None:
        for _ in range(each):
            pool.release(pool.acquire(None))

    workers = [threading.Thread(target=body) for _ in range(threads)]
    start = time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.process_time() - start


def pairs_async(pool: Any, pairs: int) -> float:
    """Seconds for ``pairs`` pairs in one task on asyncio."""

    async def body() -> float:
        start = time.thread_time()
        for _ in range(pairs):
            await pool.release(await pool.acquire(0))
        return time.thread_time() - start

    return float(anyio.run(body, backend="asyncio"))


def best_us(measure: Callable[[Any, int], float], make: Callable[[], Any], pairs: int) -> float:
    """Best of REPEATS, in microseconds per pair (a fresh pool each time)."""
    return min(measure(make(), pairs) for _ in range(REPEATS)) / pairs * 1e6


def rows(pairs: int) -> list[tuple[str, float, float]]:
    threaded, tasks = kvstress.ThreadedBlockPool, kvstress.AsyncBlockPool
    cases: list[tuple[str, Callable[[Any, int], float], Callable[[], Any], Callable[[Any], Any]]] = [
        ("1 thread, 2 KiB block", pairs_threaded, lambda: threaded(64, SMALL), kvstress.audit),
        ("1 thread, 64 KiB block", pairs_threaded, lambda: threaded(64, LARGE), kvstress.audit),
        ("1 thread, 2 KiB, holder fills it", pairs_filled, lambda: threaded(64, SMALL), kvstress.audit),
        (
            "1 thread, 2 KiB, stack_limit=0",
            pairs_threaded,
            lambda: threaded(64, SMALL),
            lambda pool: kvstress.audit(pool, stack_limit=0),
        ),
        ("4 threads, 8 blocks, 2 KiB", pairs_contended, lambda: threaded(8, SMALL), kvstress.audit),
        ("asyncio, 1 task, 2 KiB", pairs_async, lambda: tasks(64, SMALL), kvstress.audit),
    ]
    out = []
    for name, measure, make, wrap in cases:
        bare = best_us(measure, make, pairs)
        audited = best_us(measure, lambda make=make, wrap=wrap: wrap(make()), pairs)  # type: ignore[misc]
        out.append((name, bare, audited))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs per repeat (default 20000)")
    args = parser.parse_args()
    if args.pairs < 100:
        parser.error("--pairs must be at least 100")
    print(f"{'case':<34} {'bare us/pair':>12} {'audited':>9} {'ratio':>6}")
    for name, bare, audited in rows(args.pairs):
        print(f"{name:<34} {bare:>12.2f} {audited:>9.2f} {audited / bare:>5.2f}x")


if __name__ == "__main__":
    main()
