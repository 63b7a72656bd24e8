"""explore(): finding an async reset-after-offer bug that plain asyncio never hits, and proving a fix.

The tiny pool below is written the way a user might. Its buggy release puts the block back in
the free queue, then awaits, then zeroes it: a task that acquires during that await gets a block
still holding the previous tenant's data. Plain asyncio's FIFO never runs a fresh acquire in that
window for this program, so it never fails there; a scheduler that may delay a task's first step
finds the window at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import find, settings

from kvstress.controlled import explore
from kvstress.schedulers import (
    DFSScheduler,
    HypothesisScheduler,
    MetricsScheduler,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Schedule,
    ScheduleDivergence,
    Scheduler,
    hypothesis_schedulers,
)


class DirtyBlock(AssertionError):
    """A block was handed out still holding a previous tenant's data."""


class TinyPool:
    """Blocks 0..n-1, a free queue, one event per parked waiter; ``data[b] == 0`` means zeroed."""

    def __init__(self, blocks: int, *, reset_after_offer: bool) -> None:
        self.free = deque(range(blocks))
        self.data = [0] * blocks
        self.waiters: deque[asyncio.Event] = deque()
        self.reset_after_offer = reset_after_offer

    async def acquire(self) -> int:
        """Take a free block (parking until one is released); it must be zeroed."""
        while not self.free:
            parked = asyncio.Event()
            self.waiters.append(parked)
            await parked.wait()
        block = self.free.popleft()
        if self.data[block] != 0:
            raise DirtyBlock(f"block {block} handed out holding tenant {self.data[block]}'s data")
        return block

    async def release(self, block: int) -> None:
        """Zero the block and offer it back; the buggy flavour offers first and zeroes after an await."""
        if self.reset_after_offer:
            self.free.append(block)
            await asyncio.sleep(0)  # BUG: the block is up for grabs before it is zeroed
            self.data[block] = 0
        else:
            self.data[block] = 0
            self.free.append(block)
        if self.waiters:
            self.waiters.popleft().set()
        await asyncio.sleep(0)


def tenants(
    *, reset_after_offer: bool, count: int = 3, blocks: int = 2, rounds: int = 2
) -> Callable[[], Coroutine[Any, Any, None]]:
    """A program of ``count`` tasks that each acquire, write, yield and release ``rounds`` times."""

    async def main() -> None:
        pool = TinyPool(blocks, reset_after_offer=reset_after_offer)

        async def tenant(me: int) -> None:
            for _ in range(rounds):
                block = await pool.acquire()
                pool.data[block] = me
                await asyncio.sleep(0)
                await pool.release(block)

        async with asyncio.TaskGroup() as group:
            for me in range(1, count + 1):
                group.create_task(tenant(me))

    return main


def dirty_block(failure: BaseException | None) -> DirtyBlock:
    """The DirtyBlock inside a TaskGroup's exception group (fails the test if there is none)."""
    assert isinstance(failure, ExceptionGroup), failure
    matched, _ = failure.split(DirtyBlock)
    assert matched is not None, failure
    error = matched.exceptions[0]
    assert isinstance(error, DirtyBlock)
    return error


def test_plain_asyncio_never_finds_the_bug() -> None:
    """Fifty runs on the stock event loop all pass: its FIFO order never opens the window."""
    for _ in range(50):
        asyncio.run(tenants(reset_after_offer=True)())


@pytest.mark.parametrize(
    "make",
    [lambda: RandomScheduler(seed=1), lambda: PCTScheduler(depth=2, seed=1), lambda: DFSScheduler(1)],
    ids=["random", "pct", "dfs"],
)
def test_scheduler_finds_reset_after_offer(make: Callable[[], Scheduler]) -> None:
    """Random, PCT and bounded search each find the dirty hand-out within 50 executions."""
    found = explore(tenants(reset_after_offer=True), make(), max_executions=50)
    assert found.failed and found.executions <= 50
    assert "holding tenant" in str(dirty_block(found.failure))


def test_same_seed_same_failure_and_replay_reproduces_it() -> None:
    """One seed finds the same failure at the same execution; its schedule replays to it."""
    first = explore(tenants(reset_after_offer=True), RandomScheduler(seed=9), max_executions=50)
    second = explore(tenants(reset_after_offer=True), RandomScheduler(seed=9), max_executions=50)
    assert first.schedule is not None and first.schedule == second.schedule
    assert first.executions == second.executions
    message = str(dirty_block(first.failure))
    assert str(dirty_block(second.failure)) == message

    replay = ReplayScheduler(first.schedule.encode())
    replayed = explore(tenants(reset_after_offer=True), replay, max_executions=1)
    assert str(dirty_block(replayed.failure)) == message
    assert replayed.schedule == first.schedule


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_bounded_search_proves_the_fixed_pool_clean(bound: int) -> None:
    """DFS runs every interleaving of the fixed pool within the bound; none fails."""
    result = explore(
        tenants(reset_after_offer=False, count=2, blocks=1), DFSScheduler(bound), max_executions=5000
    )
    assert result.exhausted and not result.failed
    assert result.executions >= 1 + bound


def test_a_larger_bound_explores_more() -> None:
    """Each extra preemption allowed adds interleavings to the search of the fixed pool."""
    counts = [
        explore(
            tenants(reset_after_offer=False, count=2, blocks=1), DFSScheduler(bound), max_executions=5000
        ).executions
        for bound in (0, 1, 2)
    ]
    assert counts[0] < counts[1] < counts[2]


def test_bound_zero_misses_what_bound_one_finds() -> None:
    """The bug needs one preemption: bound 0 proves the buggy pool 'clean', bound 1 does not."""
    program = tenants(reset_after_offer=True)
    assert not explore(program, DFSScheduler(0), max_executions=5000).failed
    assert explore(program, DFSScheduler(1), max_executions=5000).failed


def test_hypothesis_shrinks_the_failing_schedule() -> None:
    """Hypothesis finds the bug and shrinks its schedule to a few decisions and preemptions."""

    def fails(scheduler: HypothesisScheduler) -> bool:
        return explore(tenants(reset_after_offer=True), scheduler, max_executions=1).failed

    found = find(
        hypothesis_schedulers(), fails, settings=settings(database=None, derandomize=True, max_examples=200)
    )
    counted = MetricsScheduler(ReplayScheduler(found.schedule()))
    assert explore(tenants(reset_after_offer=True), counted, max_executions=1).failed
    assert counted.metrics.decisions <= 10
    assert counted.metrics.preemptions <= 2


def test_divergence_is_not_reported_as_a_finding() -> None:
    """Replaying one program's schedule on another raises ScheduleDivergence instead of 'failing'."""
    recorded = Schedule("random", 0, (1, 7, 7, 7))
    with pytest.raises(ScheduleDivergence, match="replay diverged"):
        explore(tenants(reset_after_offer=False), ReplayScheduler(recorded), max_executions=1)


def test_max_executions_is_validated() -> None:
    """max_executions below 1 raises ValueError naming it and the value."""
    with pytest.raises(ValueError, match=r"max_executions must be an int >= 1, got 0 \(int\)"):
        explore(tenants(reset_after_offer=False), RandomScheduler(seed=1), max_executions=0)
