"""The pool on its hot path, side by side with the obvious alternatives, measured in one run.

Run from the repository root: ``python benchmarks/bench_pool.py [--device cuda]`` (about a
minute; the device applies to sections 1, 2 and 4, the scale section is bookkeeping). Every figure
is the best of a few repeats in this process, and every target is a ratio between two figures
measured here, never an absolute time: numbers move with the machine, ratios much less.

1. Threads, one thread: acquire + mark_in_use + release (reset included) pairs/s, ours against a
   seed-style pool (a lock, a deque, one tensor per block zeroed with its own call) and against
   a bare ``collections.deque`` popleft/append (the interpreter's floor). Then the batched forms,
   per block: 32 acquires then one ``release_many``, and one ``acquire_many(32)``, a
   ``mark_in_use`` each, one ``release_many`` (a request's block table, as a server takes and
   frees it); and the same with one ``mark_in_use_many`` for the batch (our pools' optional
   batched mark). Then two threads contending.
2. Async: ours against an anyio Semaphore + deque pool, on asyncio (the two alternate, repeat
   by repeat).
3. Scale: building 1,000,000 blocks, bookkeeping bytes per block beyond the block memory
   (tracemalloc: the Python heap; block memory is torch's), pairs/s at 1,000,000 against 1,000.
4. Reset bandwidth: zeroing released blocks (one by one, and with ``release_many``) against
   torch's own copy of the same bytes.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout

from kvstress import AsyncBlockPool, ThreadedBlockPool  # noqa: E402

PAIRS = 100_000
REPEATS = 5
SHAPE = (2, 2, 16, 2, 8)  # the tiny card's block: 2 KiB, so the per-call costs show
BATCH = 32


class SeedPool:
    """The seed's pool: one tensor per block, a lock and a deque, ``zero_()`` per release."""

    def __init__(self, num_blocks: int, shape: tuple[int, ...], device: str = "cpu") -> None:
        self.blocks = [torch.zeros(shape, device=device) for _ in range(num_blocks)]
        self.free = collections.deque(range(num_blocks))
        self.lock = threading.Lock()
        self.not_empty = threading.Condition(self.lock)

    def acquire(self) -> int:
        with self.lock:
            while not self.free:
                self.not_empty.wait()
            return self.free.popleft()

    def release(self, block_id: int) -> None:
        self.blocks[block_id].zero_()
        with self.lock:
            self.free.append(block_id)
            self.not_empty.notify()


class SemaphorePool:
    """The obvious async pool: an anyio Semaphore counts free blocks, a deque holds them."""

    def __init__(self, num_blocks: int, shape: tuple[int, ...], device: str = "cpu") -> None:
        self.storage = torch.zeros((num_blocks, *shape), device=device)
        self.free = collections.deque(range(num_blocks))
        self.available = anyio.Semaphore(num_blocks)

    async def acquire(self) -> int:
        await self.available.acquire()
        return self.free.popleft()

    async def release(self, block_id: int) -> None:
        self.storage[block_id].zero_()
        self.free.append(block_id)
        self.available.release()


def best_rate(run: Callable[[int], None], n: int) -> float:
    """The best of ``REPEATS`` runs of ``run(n)``, in operations per second."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run(n)
        times.append(time.perf_counter() - start)
    return n / min(times)


def best_rates(runs: list[Callable[[int], None]], n: int) -> list[float]:
    """``best_rate`` for several runs at once, alternating repeat by repeat, so that a burst of
    load on a shared machine falls on all of them alike."""
    best = [float("inf")] * len(runs)
    for _ in range(REPEATS):
        for index, run in enumerate(runs):
            start = time.perf_counter()
            run(n)
            best[index] = min(best[index], time.perf_counter() - start)
    return [n / seconds for seconds in best]


def ours_pairs(pool: ThreadedBlockPool) -> Callable[[int], None]:
    def run(n: int) -> None:
        acquire, mark, release = pool.acquire, pool.mark_in_use, pool.release
        for _ in range(n):
            block = acquire()
            mark(block)  # type: ignore[arg-type]
            release(block)  # type: ignore[arg-type]

    return run


def ours_batched(pool: ThreadedBlockPool) -> Callable[[int], None]:
    def run(n: int) -> None:
        acquire, mark, release_many = pool.acquire, pool.mark_in_use, pool.release_many
        for _ in range(n // BATCH):
            blocks = [acquire() for _ in range(BATCH)]
            for block in blocks:
                mark(block)  # type: ignore[arg-type]
            release_many(blocks)  # type: ignore[arg-type]

    return run


def ours_many(pool: ThreadedBlockPool) -> Callable[[int], None]:
    def run(n: int) -> None:
        acquire_many, mark, release_many = pool.acquire_many, pool.mark_in_use, pool.release_many
        for _ in range(n // BATCH):
            blocks = acquire_many(BATCH)
            for block in blocks:  # type: ignore[union-attr]
                mark(block)
            release_many(blocks)  # type: ignore[arg-type]

    return run


def ours_many_marked(pool: ThreadedBlockPool) -> Callable[[int], None]:
    def run(n: int) -> None:
        acquire_many, mark_many, release_many = pool.acquire_many, pool.mark_in_use_many, pool.release_many
        for _ in range(n // BATCH):
            blocks = acquire_many(BATCH)
            mark_many(blocks)  # type: ignore[arg-type]
            release_many(blocks)  # type: ignore[arg-type]

    return run


def seed_pairs(pool: SeedPool) -> Callable[[int], None]:
    def run(n: int) -> None:
        acquire, release = pool.acquire, pool.release
        for _ in range(n):
            release(acquire())

    return run


def deque_floor(n: int) -> None:
    free = collections.deque(range(1024))
    pop, push = free.popleft, free.append
    for _ in range(n):
        push(pop())


def contended(run: Callable[[int], None], threads: int) -> float:
    """Pairs/s of ``threads`` threads each running ``run(PAIRS // threads)`` at once (best of 3)."""
    best = 0.0
    for _ in range(3):
        workers = [threading.Thread(target=run, args=(PAIRS // threads,)) for _ in range(threads)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        best = max(best, PAIRS / (time.perf_counter() - start))
    return best


def row(name: str, rate: float, reference: float, target: str = "") -> None:
    print(f"   {name:<58} {rate:>13,.0f} {rate / reference:>8.2f}x  {target}")


def bench_threads(device: str) -> None:
    print(f"1. Threads: pairs/s, block {SHAPE} float32 on {device}, reset included")
    print(f"   {'':<58} {'pairs/s':>13} {'vs seed':>9}")
    ours, seed = ThreadedBlockPool(1024, SHAPE, device=device), SeedPool(1024, SHAPE, device)
    runs = [seed_pairs(seed), deque_floor, ours_pairs(ours), ours_batched(ours), ours_many(ours)]
    runs.append(ours_many_marked(ours))
    seed_rate, floor, ours_rate, batched, many, many_marked = best_rates(runs, PAIRS)
    row("seed-style pool (deque, zero_ per block)", seed_rate, seed_rate)
    row("ours: acquire + mark_in_use + release", ours_rate, seed_rate, "target >= 3x")
    row(f"ours: {BATCH} acquires, marks, one release_many", batched, seed_rate, "(per block)")
    row(f"ours: acquire_many({BATCH}), marks, release_many", many, seed_rate, "per block, target >= 3x")
    row(f"ours: acquire_many({BATCH}), mark_in_use_many, release_many", many_marked, seed_rate, "(per block)")
    row("collections.deque popleft + append (floor)", floor, seed_rate)
    print(f"   ours / floor: {ours_rate / floor:.1%} single, {batched / floor:.1%} batched (target >= 5%)")
    seed_2 = contended(seed_pairs(seed), 2)
    ours_2 = contended(ours_pairs(ours), 2)
    print("   two threads contending (pairs/s in all):")
    row("seed-style pool", seed_2, seed_2)
    row("ours", ours_2, seed_2)


def bench_async(device: str) -> None:
    print(f"\n2. Async (asyncio) on {device}: acquire + release pairs/s, reset included")

    async def measure() -> tuple[float, float]:
        ours, plain = AsyncBlockPool(1024, SHAPE, device=device), SemaphorePool(1024, SHAPE, device)
        sides = (
            (ours.acquire, ours.release, ours.mark_in_use),
            (plain.acquire, plain.release, None),
        )
        best = [float("inf"), float("inf")]
        # The two alternate, repeat by repeat, so a burst of load on a shared machine falls on
        # both alike rather than on whichever happened to run then.
        for _ in range(2 * REPEATS):
            for side, (acquire, release, mark) in enumerate(sides):
                start = time.perf_counter()
                for _ in range(PAIRS // 10):
                    block = await acquire()  # type: ignore[operator]
                    if mark is not None:
                        mark(block)
                    await release(block)  # type: ignore[operator]
                best[side] = min(best[side], time.perf_counter() - start)
        return (PAIRS // 10) / best[0], (PAIRS // 10) / best[1]

    ours_rate, plain_rate = anyio.run(measure)
    print(f"   {'':<58} {'pairs/s':>13} {'vs plain':>9}")
    row("anyio Semaphore + deque pool", plain_rate, plain_rate)
    row("ours (AsyncBlockPool, with mark_in_use)", ours_rate, plain_rate, "target >= 1.0x")


def bench_scale() -> None:
    print("\n3. Scale: 1,000,000 blocks of one float")
    tracemalloc.start()
    start = time.perf_counter()
    big = ThreadedBlockPool(1_000_000, (1,))
    built = time.perf_counter() - start
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    small = ThreadedBlockPool(1_000, (1,))
    at_small = best_rate(ours_pairs(small), PAIRS // 2)
    at_big = best_rate(ours_pairs(big), PAIRS // 2)
    print(f"   built in {built:.2f} s (target < 2 s)")
    print(f"   bookkeeping {heap / 1_000_000:.1f} bytes/block on the Python heap (target <= 64)")
    ratio = at_big / at_small
    print(f"   pairs/s at 1,000 blocks {at_small:,.0f}, at 1,000,000 {at_big:,.0f}: {ratio:.2f}x (O(1): ~1)")


def bench_reset(device: str) -> None:
    shape = (2, 2, 16, 8, 64)  # 64 KiB a block
    count = 2048 if device == "cpu" else 16384  # beyond the caches: 128 MiB (CPU), 1 GiB (GPU)
    print(f"\n4. Reset bandwidth on {device}: {count} released blocks of {shape} float32")
    pool = ThreadedBlockPool(count, shape, device=device)
    nbytes = pool.storage.numel() * pool.storage.element_size()
    source, target = torch.ones_like(pool.storage), torch.empty_like(pool.storage)

    def timed(run: Callable[[], None], prepare: Callable[[], None] = lambda: None) -> float:
        times = []
        for _ in range(REPEATS):
            prepare()
            sync(device)
            start = time.perf_counter()
            run()
            sync(device)  # the device work is counted, not only its launch
            times.append(time.perf_counter() - start)
        return nbytes / min(times) / 1e9

    # Only the releases are timed: taking the blocks (a host loop) is not reset work.
    held: list[Any] = []

    def take_all() -> None:
        held[:] = [pool.acquire(0) for _ in range(count)]

    def one_by_one() -> None:
        for block in held:
            pool.release(block)

    def batched() -> None:
        pool.release_many(held)

    copy = timed(lambda: target.copy_(source))
    single, many = timed(one_by_one, take_all), timed(batched, take_all)
    print(f"   {'':<58} {'GB/s':>13} {'vs copy':>9}")
    print(f"   {'torch copy_ of the same bytes':<58} {copy:>13.1f} {1.0:>8.2f}x")
    print(f"   {'release, one block at a time':<58} {single:>13.1f} {single / copy:>8.2f}x")
    print(f"   {'release_many (one reset for all)':<58} {many:>13.1f} {many / copy:>8.2f}x  target >= 0.70x")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description="The pool's hot path, side by side, in one run.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (%(default)s)")
    device = parser.parse_args().device
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    print(f"kvstress pool benchmarks: python {sys.version.split()[0]}, torch {torch.__version__}\n")
    bench_threads(device)
    bench_async(device)
    bench_scale()
    bench_reset(device)


if __name__ == "__main__":
    main()
