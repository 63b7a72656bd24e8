"""The fixture pools: the simple ones keep the protocol, and each broken one shows its one bug."""

from __future__ import annotations

import functools
import inspect
import threading
import time
from typing import Any

import anyio
import pytest
import torch
from pools import broken
from pools._simple import Block, SimpleAsyncPool, SimpleThreadedPool

from kvstress import BlockState

INVARIANT_IDS = {
    "dirty-read",
    "shared-block",
    "counter-mismatch",
    "queue-corruption",
    "lost-block",
    "illegal-transition",
    "refcount",
    "double-release",
    "timeout-early",
    "timeout-late",
    "busy-wait",
    "lost-wakeup",
    "hang",
    "crash",
}
SHAPE = (2, 3)


def exhausted(cls: type[SimpleThreadedPool]) -> tuple[SimpleThreadedPool, Block]:
    """A one-block threaded pool and the block, held."""
    pool = cls(1, SHAPE)
    block = pool.acquire(0)
    assert block is not None
    return pool, block


async def exhausted_async(cls: type[SimpleAsyncPool]) -> tuple[SimpleAsyncPool, Block]:
    """A one-block async pool and the block, held."""
    pool = cls(1, SHAPE)
    block = await pool.acquire(0)
    assert block is not None
    return pool, block


def acquire_in_thread(pool: SimpleThreadedPool, timeout: float) -> tuple[threading.Thread, list[object]]:
    """Start a daemon thread that acquires; its result lands in the list."""
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(timeout)), daemon=True)
    waiter.start()
    return waiter, got


def assert_parked_then_released(pool: SimpleThreadedPool, block: Block, waiter: threading.Thread) -> float:
    """Let the waiter park, release ``block``, wait for the waiter; return the seconds since the release."""
    time.sleep(0.05)
    released_at = time.monotonic()
    assert pool.release(block) is True
    waiter.join(5)
    assert not waiter.is_alive()
    return time.monotonic() - released_at


async def cancel_a_woken_waiter(pool: SimpleAsyncPool, held: Block) -> list[Block | None]:
    """Park a waiter, release ``held`` to it and cancel the waiter at once; return what it got."""
    got: list[Block | None] = []
    scope = anyio.CancelScope()

    async def waiter() -> None:
        with scope:
            got.append(await pool.acquire(5))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.02)
        assert await pool.release(held) is True
        scope.cancel()
    return got


# --- the correct pools: threaded ---------------------------------------------------------------


def test_simple_threaded_acquire_gives_zeroed_acquired_block() -> None:
    """A fresh block is ACQUIRED, refcount 1, all zeros, of the pool's shape, with an id in range."""
    pool = SimpleThreadedPool(3, SHAPE)
    block = pool.acquire()
    assert block is not None
    assert (block.state, block.refcount, tuple(block.data.shape)) == (BlockState.ACQUIRED, 1, SHAPE)
    assert 0 <= block.id < pool.num_blocks
    assert torch.count_nonzero(block.data) == 0


def test_simple_threaded_release_is_true_once_then_false() -> None:
    """A shared block returns on its last release only; a double release is False and changes nothing."""
    pool = SimpleThreadedPool(1, SHAPE)
    block = pool.acquire(0)
    assert block is not None
    pool.retain(block)
    pool.mark_in_use(block)
    block.data.fill_(7.0)
    assert pool.release(block) is False
    assert (block.state, block.refcount) == (BlockState.IN_USE, 1)
    assert pool.release(block) is True
    assert block.state is BlockState.FREE and torch.count_nonzero(block.data) == 0
    assert pool.release(block) is False
    assert (block.state, pool.free_ids(), pool.free_count()) == (BlockState.FREE, [0], 1)


def test_simple_threaded_refuses_illegal_transitions() -> None:
    """retain and mark_in_use on a block that is not held raise ValueError."""
    pool = SimpleThreadedPool(1, SHAPE)
    block = pool.acquire(0)
    assert block is not None
    pool.release(block)
    with pytest.raises(ValueError, match="retain"):
        pool.retain(block)
    with pytest.raises(ValueError, match="mark_in_use"):
        pool.mark_in_use(block)


def test_simple_threaded_counter_matches_queue_after_a_mix() -> None:
    """After acquires, shares, releases and a double release, the counter equals the queue's length."""
    pool = SimpleThreadedPool(4, SHAPE)
    blocks = [pool.acquire(0) for _ in range(3)]
    assert all(b is not None for b in blocks)
    a, b, c = (blk for blk in blocks if blk is not None)
    pool.retain(b)
    pool.release(a)
    pool.release(b)
    pool.release(a)
    assert pool.free_ids() == [3, 0]
    assert pool.free_count() == len(pool.free_ids()) == 2
    pool.release(b)
    pool.release(c)
    assert pool.free_ids() == [3, 0, 1, 2]
    assert pool.free_count() == 4


def test_simple_threaded_timeout_is_not_early_and_does_not_spin() -> None:
    """timeout=0 gives up at once; a timed wait gives up no sooner than its timeout, without burning CPU."""
    pool, _ = exhausted(SimpleThreadedPool)
    assert pool.acquire(0) is None
    start, cpu = time.monotonic(), time.thread_time()
    assert pool.acquire(0.2) is None
    assert time.monotonic() - start >= 0.2
    assert time.thread_time() - cpu < 0.05


def test_simple_threaded_release_wakes_a_waiter() -> None:
    """A waiter gets the released block well within 0.5 s of the release."""
    pool, block = exhausted(SimpleThreadedPool)
    waiter, got = acquire_in_thread(pool, 5)
    assert assert_parked_then_released(pool, block, waiter) < 0.5
    assert got == [block] and block.state is BlockState.ACQUIRED


# --- the correct pools: async (asyncio and trio) -----------------------------------------------


@pytest.mark.anyio
async def test_simple_async_acquire_and_release_keep_the_protocol() -> None:
    """Acquire zeroes and counts right; release is True once then False; illegal ops raise."""
    pool = SimpleAsyncPool(2, SHAPE)
    block = await pool.acquire()
    assert block is not None
    assert (block.state, block.refcount) == (BlockState.ACQUIRED, 1)
    assert torch.count_nonzero(block.data) == 0
    pool.retain(block)
    block.data.fill_(3.0)
    assert await pool.release(block) is False
    assert await pool.release(block) is True
    assert await pool.release(block) is False
    assert torch.count_nonzero(block.data) == 0
    assert pool.free_ids() == [1, 0] and pool.free_count() == 2
    with pytest.raises(ValueError):
        pool.retain(block)
    with pytest.raises(ValueError):
        pool.mark_in_use(block)


@pytest.mark.anyio
async def test_simple_async_timeout_is_not_early_and_does_not_spin() -> None:
    """timeout=0 gives up at once; a timed wait gives up no sooner than its timeout, without burning CPU."""
    pool, _ = await exhausted_async(SimpleAsyncPool)
    assert await pool.acquire(0) is None
    start, cpu = anyio.current_time(), time.thread_time()
    assert await pool.acquire(0.2) is None
    assert anyio.current_time() - start >= 0.2
    assert time.thread_time() - cpu < 0.05


@pytest.mark.anyio
async def test_simple_async_release_wakes_a_waiter() -> None:
    """A waiting task gets the released block well within 0.5 s of the release."""
    pool, block = await exhausted_async(SimpleAsyncPool)
    got: list[tuple[Block | None, float]] = []

    async def waiter() -> None:
        got.append((await pool.acquire(5), anyio.current_time()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        released_at = anyio.current_time()
        assert await pool.release(block) is True
    assert got[0][0] is block
    assert got[0][1] - released_at < 0.5


@pytest.mark.anyio
async def test_simple_async_cancelled_waiter_never_loses_a_block() -> None:
    """A waiter cancelled just as it is woken either returns the block or leaves it free."""
    pool, block = await exhausted_async(SimpleAsyncPool)
    got = await cancel_a_woken_waiter(pool, block)
    assert got == [block] or (pool.free_ids() == [0] and block.state is BlockState.FREE)
    assert pool.free_count() == len(pool.free_ids())


# --- the broken pools --------------------------------------------------------------------------


def test_every_broken_pool_names_a_known_invariant_and_its_bug() -> None:
    """Each broken pool has an expected invariant id, a one-line docstring and the right flavour."""
    assert len(set(broken.BROKEN_POOLS)) == len(broken.BROKEN_POOLS) == 28
    for cls in broken.BROKEN_POOLS:
        expected = cls.expected  # type: ignore[union-attr]
        ids = {expected} if isinstance(expected, str) else set(expected)
        assert ids and ids <= INVARIANT_IDS, cls.__name__
        assert cls.__doc__ and "\n" not in cls.__doc__.strip(), cls.__name__
        is_async = issubclass(cls, SimpleAsyncPool)
        assert inspect.iscoroutinefunction(cls.acquire) is is_async
        assert cls.__name__.startswith("Async") is is_async
    assert [SimpleThreadedPool, SimpleAsyncPool] == broken.CORRECT_POOLS


@pytest.mark.parametrize("cls", [broken.NoResetPool, broken.PartialResetPool])
def test_unreset_block_comes_back_dirty(cls: type[SimpleThreadedPool]) -> None:
    """NoResetPool and PartialResetPool hand the next holder the old data (the last element, at least)."""
    pool, block = exhausted(cls)
    block.data.fill_(1.0)
    assert pool.release(block) is True
    again = pool.acquire(0)
    assert again is block
    assert again.data.view(-1)[-1] == 1.0


def test_reset_after_offer_pool_hands_a_waiter_dirty_data() -> None:
    """ResetAfterOfferPool: a waiter woken by the release reads the data before the late reset."""
    dirty = []
    for _ in range(20):
        pool, block = exhausted(broken.ResetAfterOfferPool)
        seen: list[int] = []

        def waiter(pool: SimpleThreadedPool = pool, seen: list[int] = seen) -> None:
            got = pool.acquire(5)
            seen.append(-1 if got is None else int(torch.count_nonzero(got.data)))

        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        block.data.fill_(1.0)
        assert_parked_then_released(pool, block, thread)
        dirty += [n for n in seen if n > 0]
        if dirty:
            break
    assert dirty, "no waiter saw the dirty block in 20 tries"


@pytest.mark.anyio
async def test_async_no_reset_pool_hands_out_dirty_data() -> None:
    """AsyncNoResetPool hands the next holder the previous holder's data."""
    pool, block = await exhausted_async(broken.AsyncNoResetPool)
    block.data.fill_(1.0)
    assert await pool.release(block) is True
    again = await pool.acquire(0)
    assert again is block and torch.count_nonzero(again.data) == block.data.numel()


def test_double_handout_pool_gives_one_block_to_two_holders() -> None:
    """DoubleHandoutPool: the 3rd acquire peeks block 2, the 4th hands out block 2 again."""
    pool = broken.DoubleHandoutPool(4, SHAPE)
    blocks = [pool.acquire(0) for _ in range(4)]
    assert [b.id for b in blocks if b is not None] == [0, 1, 2, 2]
    assert blocks[2] is blocks[3]


def test_counter_drift_pool_counts_a_block_a_timeout_never_took() -> None:
    """CounterDriftPool: a timed-out acquire leaves the counter one below the queue."""
    pool, _ = exhausted(broken.CounterDriftPool)
    assert pool.acquire(0) is None
    assert (pool.free_count(), pool.free_ids()) == (-1, [])


def test_double_offer_pool_queues_a_block_twice() -> None:
    """DoubleOfferPool: the 4th returning release puts the block in the queue twice."""
    pool = broken.DoubleOfferPool(1, SHAPE)
    for _ in range(4):
        block = pool.acquire(0)
        assert block is not None and pool.release(block) is True
    assert (pool.free_ids(), pool.free_count()) == ([0, 0], 2)


def test_non_free_in_queue_pool_queues_a_releasing_block() -> None:
    """NonFreeInQueuePool: the released block is in the queue but still RELEASING."""
    pool, block = exhausted(broken.NonFreeInQueuePool)
    assert pool.release(block) is True
    assert pool.free_ids() == [0]
    assert block.state is BlockState.RELEASING


def test_leak_on_release_pool_loses_the_third_returned_block() -> None:
    """LeakOnReleasePool: after the 3rd returning release the block is FREE yet neither queued nor counted."""
    pool, block = exhausted(broken.LeakOnReleasePool)
    for _ in range(2):
        assert pool.release(block) is True
        assert pool.acquire(0) is block
    assert pool.release(block) is True
    assert block.state is BlockState.FREE
    assert (pool.free_ids(), pool.free_count()) == ([], 0)
    assert pool.acquire(0) is None


@pytest.mark.anyio
async def test_async_cancel_leak_pool_loses_a_woken_waiters_block() -> None:
    """AsyncCancelLeakPool: a waiter cancelled just after its wake-up takes the block with it."""
    pool, block = await exhausted_async(broken.AsyncCancelLeakPool)
    got = await cancel_a_woken_waiter(pool, block)
    assert got == []
    assert (block.state, pool.free_ids(), pool.free_count()) == (BlockState.ACQUIRED, [], 0)


@pytest.mark.parametrize(
    ("cls", "op", "after"),
    [
        (broken.RetainFreePool, "retain", (BlockState.FREE, 1)),
        (broken.MarkAnyPool, "mark_in_use", (BlockState.IN_USE, 0)),
    ],
)
def test_illegal_transition_pools_accept_an_op_on_a_free_block(
    cls: type[SimpleThreadedPool], op: str, after: tuple[BlockState, int]
) -> None:
    """RetainFreePool and MarkAnyPool change a FREE block instead of raising."""
    pool, block = exhausted(cls)
    pool.release(block)
    getattr(pool, op)(block)
    assert (block.state, block.refcount) == after


def test_retain_noop_pool_frees_a_shared_block_on_the_first_release() -> None:
    """RetainNoopPool: after a retain, one release returns the block while the sharer still holds it."""
    pool, block = exhausted(broken.RetainNoopPool)
    pool.retain(block)
    assert block.refcount == 1
    assert pool.release(block) is True
    assert block.state is BlockState.FREE


def test_acquire_refcount_two_pool_never_returns_on_one_release() -> None:
    """AcquireRefcountTwoPool hands out refcount 2, so the holder's only release keeps the block."""
    pool, block = exhausted(broken.AcquireRefcountTwoPool)
    assert block.refcount == 2
    assert pool.release(block) is False
    assert (block.state, pool.free_count()) == (BlockState.ACQUIRED, 0)


@pytest.mark.parametrize(
    ("cls", "returns", "queue"),
    [(broken.DoubleReleaseTruePool, True, [0]), (broken.DoubleReleaseOfferPool, False, [0, 0])],
)
def test_double_release_pools_act_on_a_free_block(
    cls: type[SimpleThreadedPool], returns: bool, queue: list[int]
) -> None:
    """On a double release, DoubleReleaseTruePool says True; DoubleReleaseOfferPool queues the block again."""
    pool, block = exhausted(cls)
    assert pool.release(block) is True
    assert pool.release(block) is returns
    assert (pool.free_ids(), pool.free_count()) == (queue, len(queue))


@pytest.mark.parametrize("cls", [broken.EarlyTimeoutPool, broken.MillisecondsPool])
def test_early_timeout_pools_give_up_before_the_timeout(cls: type[SimpleThreadedPool]) -> None:
    """EarlyTimeoutPool and MillisecondsPool return None well before a 0.2 s timeout."""
    pool, _ = exhausted(cls)
    start = time.monotonic()
    assert pool.acquire(0.2) is None
    assert time.monotonic() - start < 0.1


def test_late_timeout_pool_gives_up_long_after_the_timeout() -> None:
    """LateTimeoutPool gives up on a 0.05 s timeout only after 4 * 0.05 + LATE_BY s."""
    pool, _ = exhausted(broken.LateTimeoutPool)
    start = time.monotonic()
    assert pool.acquire(0.05) is None
    assert time.monotonic() - start >= 0.2 + broken.LATE_BY


def test_spin_pool_looks_at_the_queue_in_a_tight_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """SpinPool looks at the queue hundreds of times in a 0.2 s wait (a parked waiter: once or twice)."""
    looks: dict[type, int] = {}
    for cls in (SimpleThreadedPool, broken.SpinPool):
        pool, _ = exhausted(cls)
        looks[cls] = 0
        wait = pool._wait

        def counting(remaining: float | None, cls: type = cls, wait: Any = wait) -> None:
            looks[cls] += 1
            wait(remaining)

        monkeypatch.setattr(pool, "_wait", counting)
        start = time.monotonic()
        assert pool.acquire(0.2) is None
        assert 0.2 <= time.monotonic() - start < 1.0
    assert looks[SimpleThreadedPool] <= 3
    assert looks[broken.SpinPool] >= 100


@pytest.mark.anyio
async def test_async_spin_pool_looks_at_the_queue_in_a_tight_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """AsyncSpinPool looks at the queue many times in a 0.2 s wait (a parked waiter: once or twice)."""
    looks: dict[type, int] = {}
    for cls in (SimpleAsyncPool, broken.AsyncSpinPool):
        pool, _ = await exhausted_async(cls)
        looks[cls] = 0
        wait = pool._wait

        async def counting(remaining: float | None, cls: type = cls, wait: Any = wait) -> bool:
            looks[cls] += 1
            return bool(await wait(remaining))

        monkeypatch.setattr(pool, "_wait", counting)
        start = anyio.current_time()
        assert await pool.acquire(0.2) is None
        assert 0.2 <= anyio.current_time() - start < 1.0
    assert looks[SimpleAsyncPool] <= 3
    assert looks[broken.AsyncSpinPool] >= 50


def test_no_notify_pool_times_out_beside_a_free_block() -> None:
    """NoNotifyPool: a waiter sleeps through the release and returns None while the block is free."""
    pool, block = exhausted(broken.NoNotifyPool)
    waiter, got = acquire_in_thread(pool, 0.3)
    assert assert_parked_then_released(pool, block, waiter) >= 0.2
    assert got == [None]
    assert pool.free_ids() == [0]


@pytest.mark.anyio
async def test_async_no_notify_pool_times_out_beside_a_free_block() -> None:
    """AsyncNoNotifyPool: a waiting task sleeps through the release and returns None beside a free block."""
    pool, block = await exhausted_async(broken.AsyncNoNotifyPool)
    got: list[Block | None] = []

    async def waiter() -> None:
        got.append(await pool.acquire(0.3))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        assert await pool.release(block) is True
    assert got == [None]
    assert pool.free_ids() == [0]


def test_deadlock_pool_hangs_on_a_returning_release() -> None:
    """DeadlockPool: a release that returns the block never finishes (run in a daemon thread)."""
    pool, block = exhausted(broken.DeadlockPool)
    thread = threading.Thread(target=pool.release, args=(block,), daemon=True)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()


def test_async_hang_pool_hangs_on_a_returning_release(anyio_backend: str) -> None:
    """AsyncHangPool: a release that returns the block never finishes (its loop runs in a daemon thread)."""
    reached: list[str] = []

    async def scenario() -> None:
        pool, block = await exhausted_async(broken.AsyncHangPool)
        reached.append("acquired")
        await pool.release(block)
        reached.append("released")

    run = functools.partial(anyio.run, scenario, backend=anyio_backend)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()
    assert reached == ["acquired"]


def test_crash_pool_raises_on_the_fifth_release() -> None:
    """CrashPool: the 5th call of release raises RuntimeError."""
    pool = broken.CrashPool(1, SHAPE)
    for _ in range(4):
        block = pool.acquire(0)
        assert block is not None and pool.release(block) is True
    block = pool.acquire(0)
    assert block is not None
    with pytest.raises(RuntimeError, match="release #5"):
        pool.release(block)


@pytest.mark.anyio
async def test_async_crash_pool_raises_on_the_fifth_release() -> None:
    """AsyncCrashPool: the 5th call of release raises RuntimeError."""
    pool = broken.AsyncCrashPool(1, SHAPE)
    for _ in range(4):
        block = await pool.acquire(0)
        assert block is not None and await pool.release(block) is True
    block = await pool.acquire(0)
    assert block is not None
    with pytest.raises(RuntimeError, match="release #5"):
        await pool.release(block)
