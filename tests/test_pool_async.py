"""The async pool keeps every rule of the pool protocol, on asyncio and on trio."""

from __future__ import annotations

import asyncio
import inspect

import anyio
import pytest
import structlog
import torch
import trio.testing

from kvstress import AsyncBlockPool, BlockState, PoolExhausted, ThreadedBlockPool

pytestmark = pytest.mark.anyio


def make(num_blocks: int = 2) -> AsyncBlockPool:
    return AsyncBlockPool(num_blocks, (2, 2))


async def test_acquire_gives_zeroed_acquired_block() -> None:
    """A fresh block is ACQUIRED, refcount 1 and all zeros."""
    pool = make()
    block = await pool.acquire()
    assert block is not None
    assert (block.state, block.refcount) == (BlockState.ACQUIRED, 1)
    assert torch.count_nonzero(block.data) == 0


async def test_flavour_is_told_apart_by_coroutine_acquire() -> None:
    """The harness tells async from threaded pools by inspect.iscoroutinefunction(acquire)."""
    assert inspect.iscoroutinefunction(make().acquire)
    assert inspect.iscoroutinefunction(make().release)
    assert not inspect.iscoroutinefunction(ThreadedBlockPool(1, (1,)).acquire)


async def test_timeout_zero_tries_once_and_timeout_is_not_early() -> None:
    """timeout=0 returns None at once; a timed wait returns None only after its timeout."""
    pool = make(1)
    await pool.acquire()
    assert await pool.acquire(0) is None
    start = anyio.current_time()
    assert await pool.acquire(0.05) is None
    assert anyio.current_time() - start >= 0.05


async def test_release_wakes_a_waiter() -> None:
    """A waiting acquire gets the block that another task releases."""
    pool = make(1)
    held = await pool.acquire()
    assert held is not None
    got: list[object] = []
    async with anyio.create_task_group() as tg:

        async def waiter() -> None:
            got.append(await pool.acquire(10))

        tg.start_soon(waiter)
        await anyio.sleep(0.01)
        assert await pool.release(held)
    assert got and got[0] is not None


async def test_cancelled_waiter_takes_no_block() -> None:
    """Cancelling waiting acquires leaves every block accounted for."""
    pool = make(1)
    held = await pool.acquire()
    assert held is not None
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(pool.acquire, None)
        await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert await pool.release(held)
    assert pool.free_count() == 1 and pool.free_ids() == [held.id]
    assert pool.metrics()["acquired_count"] == 0


def test_woken_then_cancelled_waiter_passes_the_wakeup_on() -> None:
    """A waiter cancelled by asyncio right after its wake-up hands the wake-up to the next one.

    (anyio and trio deliver a cancellation only at the next checkpoint, so there the woken
    waiter simply takes the block; plain asyncio's Task.cancel can still strike.)
    """

    async def main() -> list[tuple[str, object]]:
        loop, released_at = asyncio.get_running_loop(), float("inf")
        pool = make(1)
        held = await pool.acquire()
        assert held is not None
        got: list[tuple[str, object]] = []

        async def waiter(name: str) -> None:
            block = await pool.acquire(5)
            got.append((name, block is not None and loop.time() - released_at < 1.0))

        first = asyncio.ensure_future(waiter("first"))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(waiter("second"))
        await asyncio.sleep(0.01)
        notify = pool._notify

        def wake_then_cancel(count: int = 1) -> None:
            notify(count)  # wakes the first waiter ...
            first.cancel()  # ... which is cancelled before it can run
            pool._notify = notify  # type: ignore[method-assign]

        pool._notify = wake_then_cancel  # type: ignore[method-assign]
        released_at = loop.time()
        await pool.release(held)
        await asyncio.gather(first, second, return_exceptions=True)
        return got

    got = asyncio.run(main())
    assert got == [("second", True)]  # promptly, not after its 5 s timeout


def test_task_cancel_right_after_a_take_gives_the_block_back() -> None:
    """Task.cancel() landing on acquire's yield after its take (anyio's shield does not stop
    it) gives the block back: the cancelled acquire holds nothing and the pool loses nothing."""

    async def main() -> tuple[list[int], int]:
        pool = make(2)
        taker = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)  # the taker has taken block 0 and yields
        assert pool.free_count() == 1
        taker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taker
        return sorted(pool.free_ids()), pool.metrics()["acquired_count"]

    assert asyncio.run(main()) == ([0, 1], 0)


async def test_release_never_suspends_so_task_cancel_cannot_cut_it_short() -> None:
    """release completes in its first step: a coroutine that is never resumed has released."""
    pool = make(1)
    block = await pool.acquire()
    assert block is not None
    with pytest.raises(StopIteration) as done:
        pool.release(block).send(None)
    assert done.value.value is True
    assert pool.free_count() == 1 and block.state is BlockState.FREE


async def test_dump_names_the_holding_task() -> None:
    """The holder of a block is the acquiring task, named as the backend names it."""
    pool = make(1)
    await pool.acquire()
    (info,) = pool.dump()
    assert info.holder is not None and info.holder != "?"
    assert info.holder.split("#")[0] == anyio.get_current_task().name.split("#")[0]


async def test_cancelled_release_still_completes() -> None:
    """release inside a cancelled scope is shielded: the block is returned all the same."""
    pool = make(1)
    block = await pool.acquire()
    assert block is not None
    with anyio.CancelScope() as scope:
        scope.cancel()
        assert await pool.release(block) is True
    assert block.state is BlockState.FREE and pool.free_count() == 1


async def test_shared_block_returns_on_last_release_only() -> None:
    """retain and mark_in_use are sync; only the last release returns the block."""
    pool = make(1)
    block = await pool.acquire()
    assert block is not None
    pool.mark_in_use(block)
    pool.retain(block)
    assert await pool.release(block) is False
    assert await pool.release(block) is True
    assert pool.free_count() == 1


async def test_double_release_is_counted_and_logged() -> None:
    """A second release returns False, changes nothing and logs a warning."""
    pool = make(2)
    block = await pool.acquire()
    assert block is not None
    await pool.release(block)
    before = pool.free_ids()
    with structlog.testing.capture_logs() as logs:
        assert await pool.release(block) is False
    assert pool.free_ids() == before
    assert [e["event"] for e in logs] == ["double_release"]
    assert pool.metrics()["double_release_count"] == 1


async def test_async_context_manager_releases_on_exception() -> None:
    """async with pool.block() releases even when the body raises."""
    pool = make(1)
    with pytest.raises(RuntimeError):
        async with pool.block(1) as block:
            block.data.fill_(3)
            raise RuntimeError("boom")
    assert pool.free_count() == 1
    again = await pool.acquire(0)
    assert again is not None and torch.count_nonzero(again.data) == 0


async def test_async_context_manager_raises_pool_exhausted() -> None:
    """async with pool.block(timeout) raises PoolExhausted when no block comes."""
    pool = make(1)
    await pool.acquire()
    with pytest.raises(PoolExhausted):
        async with pool.block(0.01):
            pass


async def test_bad_timeout_is_a_value_error() -> None:
    """A negative timeout raises ValueError naming timeout."""
    with pytest.raises(ValueError, match="timeout"):
        await make().acquire(-1)


def test_trio_mock_clock_makes_a_long_timeout_instant() -> None:
    """A 30 s acquire timeout under trio's autojumping MockClock ends at once, on the deadline."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def main() -> tuple[object, float]:
        pool = make(1)
        await pool.acquire()
        start = anyio.current_time()
        result = await pool.acquire(30)
        return result, anyio.current_time() - start

    result, waited = anyio.run(main, backend="trio", backend_options={"clock": clock})
    assert result is None
    assert 30 <= waited < 30.001
