"""The async tiered pool: its tiers on an event loop, the loop's clock, cancellation, and the harness."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
import trio
import trio.testing
from hypothesis.stateful import run_state_machine_as_test
from machine_settings import ci, hunt
from tiered_mutants import _IdleOnAnyReturnStorage, _swap_storage

import kvstress
from kvstress import AsyncTieredBlockPool, BlockState, TimingPolicy
from kvstress._violation import InvariantViolation
from kvstress.pool._block import Block
from kvstress.pool._tiered_storage import SegmentedStorage
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler

CI = ci(20)
HUNT = hunt(CI, 100)


class AsyncChurningTieredPool(AsyncTieredBlockPool):
    """Correct: one-block core, two-block segments, shrink at once (the most grow/shrink churn)."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        options.setdefault("core_blocks", 1)
        options.setdefault("grow_blocks", 2)
        options.setdefault("idle_shrink_s", 0.0)
        super().__init__(num_blocks, block_shape, **options)


class AsyncIdleOnAnyReturnPool(AsyncChurningTieredPool):
    """A segment goes idle when any of its blocks returns: given back while others are lent."""

    expected = ("crash", "shared-block")

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        _swap_storage(self, _IdleOnAnyReturnStorage)  # type: ignore[arg-type]


async def held(pool: AsyncTieredBlockPool, count: int) -> list[Block]:
    """``count`` blocks acquired at once (no waiting)."""
    blocks = [await pool.acquire(0) for _ in range(count)]
    assert all(b is not None for b in blocks)
    return [b for b in blocks if b is not None]


@pytest.mark.anyio
async def test_the_elastic_tier_grows_under_load_and_comes_back_zeroed() -> None:
    """Past the core a segment is allocated on first use; released elastic blocks come back
    zeroed, and with idle_shrink_s 0 the segment goes the moment its last block does."""
    pool = AsyncTieredBlockPool(4, (2, 2), core_blocks=2, grow_blocks=2, idle_shrink_s=0.0)
    blocks = await held(pool, 4)
    assert [b.id for b in blocks] == [0, 1, 2, 3] and pool.metrics()["elastic_blocks"] == 2
    for block in blocks:
        block.data.fill_(3.0)
    assert await pool.release_many(blocks) == [True] * 4
    metrics = pool.metrics()
    assert metrics["elastic_blocks"] == 0 and metrics["elastic_shrink_count"] == 1
    again = await held(pool, 4)
    assert all(torch.count_nonzero(b.data) == 0 and b.state is BlockState.ACQUIRED for b in again)


def test_the_loops_virtual_clock_drives_the_shrink() -> None:
    """On trio's MockClock a 30 s idle costs no wall time, and the segment goes back then."""

    async def main() -> tuple[int, int]:
        pool = AsyncTieredBlockPool(2, (2,), core_blocks=1, idle_shrink_s=30.0)
        for block in await held(pool, 2):
            await pool.release(block)
        before = pool.metrics()["elastic_blocks"]
        await trio.sleep(30.0)
        await pool.release((await held(pool, 1))[0])
        return int(before), int(pool.metrics()["elastic_blocks"])

    clock = trio.testing.MockClock(autojump_threshold=0)
    assert trio.run(main, clock=clock) == (1, 0)


def test_an_elastic_block_taken_by_a_cancelled_acquire_goes_back_to_its_segment() -> None:
    """Task.cancel() right after the take gives the elastic block back: its segment counts
    nothing lent, and is given back (idle_shrink_s 0)."""

    async def main() -> tuple[list[int], int, int]:
        pool = AsyncTieredBlockPool(2, (2,), core_blocks=1, idle_shrink_s=0.0)
        (core,) = await held(pool, 1)
        taker = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)  # it has taken block 1, growing its segment, and yields
        assert pool.metrics()["elastic_blocks"] == 1
        taker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taker
        metrics = pool.metrics()
        await pool.release(core)
        return pool.free_ids(), int(metrics["elastic_blocks"]), pool._storage.lent_in(0)

    assert asyncio.run(main()) == ([0, 1], 0, 0)


class _NoMemoryStorage(SegmentedStorage):
    def lend(self, block_id: int) -> None:
        if self.segment_of(block_id) >= 0:
            raise torch.OutOfMemoryError("no memory for a segment")
        super().lend(block_id)


@pytest.mark.anyio
async def test_a_segment_that_cannot_be_allocated_puts_the_block_back() -> None:
    """Out of memory while growing: acquire raises, and the block is FREE and queued again."""
    pool = AsyncTieredBlockPool(2, (2,), core_blocks=1)
    pool._storage = _NoMemoryStorage(2, 1, 1, (2,), pool.dtype, pool.device)
    (first,) = await held(pool, 1)
    with pytest.raises(torch.OutOfMemoryError):
        await pool.acquire(0)
    assert pool.free_ids() == [1] and pool.free_count() == 1 and pool.dump()[1].state is BlockState.FREE
    assert pool.metrics()["acquired_count"] == 1
    await pool.release(first)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("factory", [AsyncTieredBlockPool, AsyncChurningTieredPool], ids=lambda f: f.__name__)
def test_state_machine_is_silent_on_the_async_tiered_pool(factory: type, backend: str) -> None:
    """kvstress' own state machine (Task.cancel() included on asyncio) finds nothing."""
    run_state_machine_as_test(kvstress.pool_machine(factory, backend=backend), settings=CI)


@pytest.mark.parametrize("factory", [AsyncTieredBlockPool, AsyncChurningTieredPool], ids=lambda f: f.__name__)
def test_controlled_schedules_find_nothing_on_the_async_tiered_pool(factory: type) -> None:
    """Seeded random and PCT interleavings of the scenarios, on the controlled loop, are clean."""
    for scheduler in (RandomScheduler(seed=11), PCTScheduler(depth=3, seed=5)):
        result = search(ScenarioConfig(factory, True, num_blocks=3), scheduler, max_executions=40)
        assert result.failure is None, result.failure.describe()


def test_a_planted_tier_bug_is_found_on_the_async_pool_too() -> None:
    """A segment given back while another of its blocks is lent: the state machine and the
    controlled scenarios each name it."""
    machine = kvstress.pool_machine(AsyncIdleOnAnyReturnPool, timing=TimingPolicy(hang_bound=1.0))
    with pytest.raises(InvariantViolation) as info:
        run_state_machine_as_test(machine, settings=HUNT)
    assert info.value.invariant in AsyncIdleOnAnyReturnPool.expected, info.value.details()
    config = ScenarioConfig(AsyncIdleOnAnyReturnPool, True, num_blocks=3)
    result = search(config, RandomScheduler(seed=3), max_executions=200, shrink=False)
    assert result.failure is not None
    assert result.failure.violation.invariant in AsyncIdleOnAnyReturnPool.expected, result.failure.describe()


def test_the_tiers_are_shared_not_copied() -> None:
    """Both flavours get their tiers from one place: neither redefines the tier hooks."""
    for name in ("_make_storage", "_handed_out", "_offered", "_put_back", "metrics"):
        assert name not in vars(kvstress.TieredBlockPool) and name not in vars(AsyncTieredBlockPool)
