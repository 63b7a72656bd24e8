"""The naive baseline: the stress test a developer writes for a pool in an afternoon.

Five short tests, each on a fresh pool, with real threads (or tasks, for an async pool, on the
target's backend) that sleep a random 0-100 us before they start, repeated until one fails or
the budget is spent:

- two holders of a shared block release it together: one answer True, one False;
- two acquirers race for the last free block: exactly one gets it;
- a release races a waiting acquire: the waiter gets a zeroed block;
- a retain races a release of a block held twice: two references are left;
- the sequential contract: release, double release, retain of a free block.

Then the same checks at the end of every test: everything handed back, the free counter equal to
the free queue, every block can be taken again and reads zero. An exception from the pool, a
test that does not finish within ``HANG_S`` and a failed check all count as a failure. Nothing
is controlled, traced or recorded: no schedule, no history, no linearizability. ``kvstress
mutants --compare`` runs it as the ``naive`` column, beside each strategy alone.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import torch

from kvstress.fuzz._target import FuzzTarget
from kvstress.harness._runner import Abandoned, run_on_a_thread, run_to_completion

HANG_S = 5.0
"""Seconds one short test may take before it counts as hung."""
JITTER_S = 1e-4
"""The most a worker sleeps before it starts."""
WAIT_S = 2.0
"""The timeout of the acquire that waits for a release."""


@dataclass
class _Test:
    """One short test's state: the pool, what each worker saw, and the blocks still held."""

    pool: Any
    held: list[Any] = field(default_factory=list)
    seen: list[Any] = field(default_factory=list)


Step = Callable[[_Test], Coroutine[Any, Any, None]]


async def _call(method: Callable[..., Any], *args: Any) -> Any:
    result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _take(test: _Test, mark: bool = True) -> Any:
    block = await _call(test.pool.acquire, 0)
    if block is None:
        raise AssertionError("a try-once acquire on a pool with free blocks answered None")
    if mark:
        await _call(test.pool.mark_in_use, block)
    test.held.append(block)
    return block


def _release_pair(blocks: int) -> tuple[Step, list[Step], Callable[[_Test], bool]]:
    async def setup(test: _Test) -> None:
        block = await _take(test)
        await _call(test.pool.retain, block)

    async def release(test: _Test) -> None:
        test.seen.append(await _call(test.pool.release, test.held[0]))

    def holds(test: _Test) -> bool:
        if sorted(test.seen) == [False, True]:
            test.held.clear()
            return True
        return False

    return setup, [release, release], holds


def _acquire_pair(blocks: int) -> tuple[Step, list[Step], Callable[[_Test], bool]]:
    async def setup(test: _Test) -> None:
        for _ in range(blocks - 1):
            await _take(test)

    async def acquire(test: _Test) -> None:
        block = await _call(test.pool.acquire, 0)
        test.seen.append(block)
        if block is not None:
            test.held.append(block)

    def holds(test: _Test) -> bool:
        return sum(block is not None for block in test.seen) == 1

    return setup, [acquire, acquire], holds


def _release_wakes(blocks: int) -> tuple[Step, list[Step], Callable[[_Test], bool]]:
    async def setup(test: _Test) -> None:
        for _ in range(blocks):
            await _take(test)
        test.held[0].data.fill_(7.0)

    async def release(test: _Test) -> None:
        await _call(test.pool.release, test.held.pop(0))

    async def acquire(test: _Test) -> None:
        block = await _call(test.pool.acquire, WAIT_S)
        test.seen.append(block is not None and bool((block.data == 0).all()))
        if block is not None:
            test.held.append(block)

    return setup, [release, acquire], lambda test: test.seen == [True]


def _retain_race(blocks: int) -> tuple[Step, list[Step], Callable[[_Test], bool]]:
    async def setup(test: _Test) -> None:
        block = await _take(test)
        await _call(test.pool.retain, block)

    async def release(test: _Test) -> None:
        await _call(test.pool.release, test.held[0])

    async def retain(test: _Test) -> None:
        await _call(test.pool.retain, test.held[0])

    def holds(test: _Test) -> bool:
        if test.held[0].refcount != 2:
            return False
        test.held.append(test.held[0])  # two references to give back
        return True

    return setup, [release, retain], holds


def _misuse(blocks: int) -> tuple[Step, list[Step], Callable[[_Test], bool]]:
    async def setup(test: _Test) -> None:
        return None

    async def misuse(test: _Test) -> None:
        block = await _take(test)
        test.held.clear()
        first, second = await _call(test.pool.release, block), await _call(test.pool.release, block)
        try:
            await _call(test.pool.retain, block)
            refused = False
        except ValueError:
            refused = True
        test.seen.append(first is True and second is False and refused)

    return setup, [misuse], lambda test: test.seen == [True]


TESTS = (_release_pair, _acquire_pair, _release_wakes, _retain_race, _misuse)


async def _at_rest(test: _Test, blocks: int) -> bool:
    """Give back what the test still holds, then: the counter equals the queue, and every block
    can be taken once more and reads zero."""
    for block in test.held:
        await _call(test.pool.release, block)
    ids = list(await _call(test.pool.free_ids))
    if await _call(test.pool.free_count) != len(ids) or sorted(set(ids)) != sorted(ids) or len(ids) != blocks:
        return False
    again = [await _call(test.pool.acquire, 0) for _ in range(blocks)]
    clean = all(block is not None and bool((block.data == 0).all()) for block in again)
    for block in again:
        if block is not None:
            await _call(test.pool.release, block)
    return clean


def _one_test(target: FuzzTarget, make: Callable[..., Any], rng: random.Random) -> bool:
    """Run one short test on a fresh pool; True when it passed."""
    blocks = target.num_blocks
    setup, workers, holds = make(blocks)
    pauses = [rng.random() * JITTER_S for _ in workers]
    pool = target.factory(blocks, target.block_shape, dtype=torch.float32, device=None)
    test = _Test(pool)

    if target.is_async:

        async def main() -> bool:
            await setup(test)

            async def worker(step: Step, pause: float) -> None:
                await anyio.sleep(pause)
                await step(test)

            async with anyio.create_task_group() as tg:
                for step, pause in zip(workers, pauses, strict=True):
                    tg.start_soon(worker, step, pause)
            return holds(test) and await _at_rest(test, blocks)

        return anyio.run(main, backend=target.backend)
    run_to_completion(setup(test))  # a threaded pool's calls never suspend: no loop needed
    errors: list[BaseException] = []

    def worker(step: Step, pause: float) -> None:
        time.sleep(pause)
        try:
            run_to_completion(step(test))
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=worker, args=(step, pause), daemon=True)
        for step, pause in zip(workers, pauses, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return holds(test) and bool(run_to_completion(_at_rest(test, blocks)))


def naive_time(target: FuzzTarget, budget_s: float, seed: int = 0) -> float | None:
    """Seconds until one of the short tests fails, raises or hangs; None if none did."""
    rng = random.Random(seed)
    start = time.monotonic()
    while time.monotonic() - start < budget_s:
        for make in TESTS:
            try:
                passed = run_on_a_thread(partial(_one_test, target, make, rng), HANG_S, name="kvstress-naive")
            except (Abandoned, Exception):
                passed = False
            if not passed:
                return time.monotonic() - start
    return None
