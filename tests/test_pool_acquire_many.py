"""acquire_many: n blocks in one lock section, all or nothing, never holding back single acquirers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import anyio
import pytest
import torch

from kvstress import AsyncBlockPool, AsyncTieredBlockPool, LeakDetection, ThreadedBlockPool, TieredBlockPool
from kvstress.pool._storage import BlockStorage

JOIN_S = 10.0  # a bound on a thread that must finish, never a timing assertion


def _parked(pool: ThreadedBlockPool, singles: int, batches: int) -> None:
    """Wait until the given numbers of threads are parked in acquire and acquire_many."""
    for _ in range(10_000):
        with pool._lock:
            if pool._waiting == singles and len(pool._needs) == batches:
                return
        time.sleep(0.001)
    raise AssertionError("the waiters never parked")


def _run(target: Callable[[], object], into: list[object]) -> threading.Thread:
    thread = threading.Thread(target=lambda: into.append(target()), daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("factory", [ThreadedBlockPool, TieredBlockPool])
def test_takes_n_blocks_zeroed_and_acquired(factory: type[ThreadedBlockPool]) -> None:
    """n distinct blocks, each ACQUIRED with refcount 1 and zeroed; the counter drops by n."""
    pool = factory(6, (2, 3))
    first = pool.acquire_many(6, 0)
    assert first is not None
    for block in first:
        block.data.fill_(5.0)
    pool.release_many(first)
    blocks = pool.acquire_many(4, 0)
    assert blocks is not None and len({b.id for b in blocks}) == 4
    assert all(b.state.name == "ACQUIRED" and b.refcount == 1 for b in blocks)
    assert all(torch.count_nonzero(b.data) == 0 for b in blocks)
    assert pool.free_count() == 2 and len(pool.free_ids()) == 2
    assert pool.metrics()["acquired_count"] == 4


def test_all_or_nothing_when_too_few_are_free() -> None:
    """With fewer than n free, a try-once or a timed call returns None and takes nothing."""
    pool = ThreadedBlockPool(4, (2,))
    held = pool.acquire_many(2, 0)
    assert held is not None
    before = pool.free_ids()
    assert pool.acquire_many(3, 0) is None
    assert pool.acquire_many(3, 0.01) is None
    assert pool.free_ids() == before and pool.free_count() == 2
    assert pool.metrics()["acquire_timeout_count"] == 2


def test_zero_blocks_is_an_empty_batch() -> None:
    """acquire_many(0) takes nothing and returns an empty list at once."""
    pool = ThreadedBlockPool(2, (2,))
    assert pool.acquire_many(0, 0) == [] and pool.free_count() == 2


@pytest.mark.parametrize("bad", [-1, 5, 1.0, True, "2", None])
def test_bad_counts_raise_naming_n(bad: object) -> None:
    """n outside 0..num_blocks (or not an int) is a ValueError naming n; nothing is taken."""
    pool = ThreadedBlockPool(4, (2,))
    with pytest.raises(ValueError, match=r"n must be an int in 0\.\.num_blocks"):
        pool.acquire_many(bad)  # type: ignore[arg-type]
    assert pool.free_count() == 4


def test_a_batch_comes_back_with_one_release_many() -> None:
    """The batch's blocks return with one release_many, in the order they were freed."""
    pool = ThreadedBlockPool(4, (2,))
    blocks = pool.acquire_many(3, 0)
    assert blocks is not None
    assert pool.release_many(blocks) == [True, True, True]
    assert pool.free_ids() == [3, 0, 1, 2]


def test_a_waiting_batch_holds_single_acquirers_back_never() -> None:
    """The fairness rule, part 1: a freed block goes to a parked single acquirer while a batch
    waits for more than is free; the batch gets its n once n are free at once."""
    pool = ThreadedBlockPool(4, (2,))
    held = pool.acquire_many(4, 0)
    assert held is not None
    batch: list[object] = []
    single: list[object] = []
    batcher = _run(lambda: pool.acquire_many(3, JOIN_S), batch)
    _parked(pool, 0, 1)
    singler = _run(lambda: pool.acquire(JOIN_S), single)
    _parked(pool, 1, 1)
    pool.release(held[0])
    singler.join(JOIN_S)
    assert single and single[0] is not None, "the single acquirer was held back by the batch"
    assert not batch and pool.free_count() == 0
    pool.release_many(held[1:])  # two free: still short of three
    _parked(pool, 0, 1)
    pool.release(single[0])  # type: ignore[arg-type]
    batcher.join(JOIN_S)
    assert batch and batch[0] is not None and len(batch[0]) == 3  # type: ignore[arg-type]


def test_two_batches_never_deadlock() -> None:
    """The fairness rule, part 2: two waiters for 2 of 2 blocks freed one at a time both finish
    (a waiting batch holds nothing, so neither can hold what the other needs)."""
    pool = ThreadedBlockPool(2, (2,))
    held = pool.acquire_many(2, 0)
    assert held is not None
    done: list[object] = []

    def batch() -> bool:
        blocks = pool.acquire_many(2, JOIN_S)
        assert blocks is not None
        pool.release_many(blocks)
        return True

    threads = [_run(batch, done), _run(batch, done)]
    _parked(pool, 0, 2)
    for block in held:
        pool.release(block)
    for thread in threads:
        thread.join(JOIN_S)
    assert done == [True, True] and pool.free_count() == 2


def test_a_batch_wakes_when_release_many_frees_enough() -> None:
    """A parked batch is woken by the release that makes n free, not only by single releases."""
    pool = ThreadedBlockPool(3, (2,))
    held = pool.acquire_many(3, 0)
    assert held is not None
    got: list[object] = []
    waiter = _run(lambda: pool.acquire_many(3, JOIN_S), got)
    _parked(pool, 0, 1)
    pool.release_many(held)
    waiter.join(JOIN_S)
    assert got and got[0] is not None and pool.free_count() == 0


def test_leak_stacks_are_sampled_as_one_by_one() -> None:
    """SIMPLE sampling picks the same acquires in a batch as it would one call at a time."""
    one, many = (ThreadedBlockPool(8, (2,), leak_sample_rate=3) for _ in range(2))
    singles = [one.acquire(0) for _ in range(8)]
    batch = many.acquire_many(8, 0)
    assert batch is not None
    sampled = [b.id for b in singles if b is not None and one._core.leaks.stack_of(b.id)]
    assert [b.id for b in batch if many._core.leaks.stack_of(b.id)] == sampled == [0, 3, 6]
    paranoid = ThreadedBlockPool(2, (2,), leak_detection=LeakDetection.PARANOID).acquire_many(2, 0)
    assert paranoid is not None
    assert all(b._core.leaks.stack_of(b.id) for b in paranoid)


def test_tiered_batch_spans_core_and_elastic_tiers() -> None:
    """A tiered batch takes the core first, then the lowest elastic ids, growing their segments."""
    pool = TieredBlockPool(8, (2,), core_blocks=2, grow_blocks=2)
    blocks = pool.acquire_many(5, 0)
    assert blocks is not None and [b.id for b in blocks] == [0, 1, 2, 3, 4]
    assert pool.metrics()["elastic_blocks"] == 4
    pool.release_many(blocks)
    assert pool.free_count() == 8


def test_tiered_batch_that_cannot_grow_puts_everything_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment that cannot be allocated mid-batch leaves every block FREE and queued."""
    pool = TieredBlockPool(6, (2,), core_blocks=2, grow_blocks=2)

    def no_memory(*args: object, **kwargs: object) -> torch.Tensor:
        raise torch.OutOfMemoryError("planted")

    monkeypatch.setattr(torch, "zeros", no_memory)
    with pytest.raises(torch.OutOfMemoryError):
        pool.acquire_many(4, 0)
    monkeypatch.undo()
    assert pool.free_count() == 6 and sorted(pool.free_ids()) == list(range(6))
    assert pool.acquire_many(6, 0) is not None


def test_cuda_hand_out_waits_once_per_reset_event() -> None:
    """On CUDA a batch reset by one release_many is handed out with one stream wait, not n; a
    reset already seen done (its event's ``query``) needs no wait at all."""
    from kvstress.pool._storage import StreamOrderedStorage

    class Event:
        def __init__(self, done: bool) -> None:
            self.done = done

        def query(self) -> bool:
            return self.done

    storage = StreamOrderedStorage.__new__(StreamOrderedStorage)
    first, second, done = Event(False), Event(False), Event(True)
    storage._ready = {0: first, 1: first, 2: first, 3: second, 4: done}  # type: ignore[dict-item]
    storage._index = 0
    waited: list[object] = []

    class Stream:
        def wait_event(self, event: object) -> None:
            waited.append(event)

    original = torch.cuda.current_stream
    torch.cuda.current_stream = lambda device=None: Stream()  # type: ignore[assignment,return-value]
    try:
        storage.hand_out_many([0, 1, 2, 3, 4])
    finally:
        torch.cuda.current_stream = original
    assert waited == [first, second] and storage._ready == {}


def test_cpu_storage_orders_nothing_for_a_batch() -> None:
    """CPU storage hands a batch out without touching any stream."""
    BlockStorage(2, (1,), torch.float32, torch.device("cpu")).hand_out_many([0, 1])


# -- async -----------------------------------------------------------------------------------

BACKENDS = ["asyncio", "trio"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("factory", [AsyncBlockPool, AsyncTieredBlockPool])
def test_async_all_or_nothing(backend: str, factory: type[AsyncBlockPool]) -> None:
    """The async pools take n at once or, short of n, return None holding nothing."""

    async def main() -> None:
        pool = factory(4, (2,))
        blocks = await pool.acquire_many(3, 0)
        assert blocks is not None and len({b.id for b in blocks}) == 3
        assert await pool.acquire_many(2, 0) is None
        assert await pool.acquire_many(2, 0.01) is None
        assert pool.free_count() == 1
        assert await pool.release_many(blocks) == [True] * 3

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_fairness_rule(backend: str) -> None:
    """A waiting batch lets a single waiter take a freed block, and two batches both finish."""

    async def main() -> None:
        pool = AsyncBlockPool(2, (2,))
        held = await pool.acquire_many(2, 0)
        assert held is not None
        results: list[str] = []

        async def batch(name: str) -> None:
            blocks = await pool.acquire_many(2, JOIN_S)
            assert blocks is not None
            results.append(name)
            await pool.release_many(blocks)

        async def single() -> None:
            block = await pool.acquire(JOIN_S)
            assert block is not None
            results.append("single")
            await anyio.sleep(0.01)
            await pool.release(block)

        async with anyio.create_task_group() as group:
            group.start_soon(batch, "b1")
            group.start_soon(batch, "b2")
            await anyio.wait_all_tasks_blocked()
            group.start_soon(single)
            await anyio.wait_all_tasks_blocked()
            await pool.release(held[0])  # one free: the single waiter's, not the batches'
            await anyio.wait_all_tasks_blocked()
            assert results == ["single"]
            await pool.release(held[1])
        assert sorted(results) == ["b1", "b2", "single"] and pool.free_count() == 2

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_cancelled_batch_holds_nothing(backend: str) -> None:
    """A batch cancelled while waiting, or woken and then cancelled, leaves every block FREE."""

    async def main() -> None:
        pool = AsyncBlockPool(3, (2,))
        held = await pool.acquire_many(3, 0)
        assert held is not None
        with anyio.move_on_after(0.01):
            await pool.acquire_many(2)
        assert not pool._batch_waiters
        assert pool.free_count() == 0 and pool.dump()[0].state.name == "ACQUIRED"
        got: list[object] = []
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def waiter() -> None:
                with scope:
                    got.append(await pool.acquire_many(3))

            group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            await pool.release_many(held)  # wakes the waiter...
            scope.cancel()  # ...which is cancelled before it runs: it completes or holds nothing
        if got:  # it returned before any cancellation could strike: the blocks are its caller's
            await pool.release_many(got[0])  # type: ignore[arg-type]
        assert pool.free_count() == 3 and sorted(pool.free_ids()) == [0, 1, 2]
        assert all(info.state.name == "FREE" for info in pool.dump())

    anyio.run(main, backend=backend)


def test_asyncio_task_cancel_on_the_fast_path_gives_the_batch_back() -> None:
    """Task.cancel() striking acquire_many's shielded checkpoint gives every block back."""

    async def main() -> None:
        pool = AsyncBlockPool(3, (2,))
        task = asyncio.ensure_future(pool.acquire_many(2))
        await asyncio.sleep(0)  # the task takes its blocks and parks on its checkpoint
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.free_count() == 3 and all(info.state.name == "FREE" for info in pool.dump())

    asyncio.run(main())


def test_batches_out_of_order_take_the_per_block_path_and_agree() -> None:
    """A batch of ids that are not one ascending run (freed out of order) is handed out and
    returned the same way, and every handle of an earlier tenancy is stale afterwards."""
    pool = ThreadedBlockPool(6, (2,))
    first = pool.acquire_many(6, 0)
    assert first is not None
    pool.release_many([first[i] for i in (4, 1, 5, 0, 3, 2)])
    second = pool.acquire_many(4, 0)
    assert second is not None and [b.id for b in second] == [4, 1, 5, 0]
    assert all(b.generation > old.generation for b in second for old in first if old.id == b.id)
    assert pool.release_many(first[:2]) == [False, False]  # stale: counted as double releases
    assert pool.metrics()["double_release_count"] == 2
    assert pool.release_many(second) == [True] * 4 and pool.free_count() == 6


def test_a_run_with_a_shared_block_drops_only_that_reference() -> None:
    """A consecutive batch whose middle block is shared returns the others and keeps that one."""
    pool = ThreadedBlockPool(4, (2,))
    blocks = pool.acquire_many(3, 0)
    assert blocks is not None
    pool.retain(blocks[1])
    assert pool.release_many(blocks) == [True, False, True]
    assert blocks[1].refcount == 1 and pool.free_count() == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_already_cancelled_scope_takes_nothing(backend: str) -> None:
    """acquire and acquire_many in a cancelled scope raise the cancellation and hold nothing
    (on asyncio the bare yield after the take is where anyio's cancellation lands)."""

    async def main() -> None:
        pool = AsyncBlockPool(2, (2,))
        got: list[object] = []
        for call in (pool.acquire, lambda: pool.acquire_many(2)):
            with anyio.CancelScope() as scope:
                scope.cancel()
                got.append(await call())  # type: ignore[operator]
        assert got == [] and pool.free_count() == 2
        assert all(info.state.name == "FREE" for info in pool.dump())

    anyio.run(main, backend=backend)
