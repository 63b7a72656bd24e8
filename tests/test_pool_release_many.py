"""release_many: one batched reset for a whole sequence's blocks, strictly before any is offered."""

from __future__ import annotations

import anyio
import pytest
import torch

from kvstress import AsyncBlockPool, BlockState, ThreadedBlockPool
from kvstress.controlled import explore_threads, spawn
from kvstress.pool import _storage, _threaded
from kvstress.pool._core import ReleaseStep
from kvstress.pool._storage import BlockStorage
from kvstress.schedulers import PCTScheduler


def test_release_many_returns_each_block_and_zeroes_it() -> None:
    """Every block comes back FREE and zeroed; the result says, per block, that it went back."""
    pool = ThreadedBlockPool(4, (2, 3))
    blocks = [pool.acquire(0) for _ in range(3)]
    for block in blocks:
        assert block is not None
        block.data.fill_(7.0)
    assert pool.release_many(blocks) == [True, True, True]  # type: ignore[arg-type]
    assert pool.free_count() == 4 and sorted(pool.free_ids()) == [0, 1, 2, 3]
    assert torch.count_nonzero(pool.storage) == 0


def test_release_many_resets_with_one_device_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks whose last reference goes are zeroed together, not one call per block."""
    pool = ThreadedBlockPool(8, (4,))
    blocks = [pool.acquire(0) for _ in range(5)]
    calls: list[list[int]] = []
    storage_type = type(pool._storage)
    original = storage_type.reset_many

    def counting(self: BlockStorage, block_ids: list[int]) -> None:
        calls.append(list(block_ids))
        original(self, block_ids)

    monkeypatch.setattr(storage_type, "reset_many", counting)
    monkeypatch.setattr(type(pool._storage), "reset", lambda self, block_id: pytest.fail("a per-block reset"))
    pool.release_many(blocks)  # type: ignore[arg-type]
    assert calls == [[0, 1, 2, 3, 4]]


def test_shared_and_repeated_blocks_follow_release_rules() -> None:
    """A shared block only drops a reference; a block listed twice is a double release the second time."""
    pool = ThreadedBlockPool(3, (2,))
    shared, single = pool.acquire(0), pool.acquire(0)
    assert shared is not None and single is not None
    pool.retain(shared)
    assert pool.release_many([shared, single, single]) == [False, True, False]
    assert shared.refcount == 1 and pool.metrics()["double_release_count"] == 1
    assert pool.release_many([shared]) == [True]
    assert pool.free_count() == 3


def test_a_foreign_handle_changes_nothing() -> None:
    """Misuse is refused before any block is released."""
    pool, other = ThreadedBlockPool(2, (2,)), ThreadedBlockPool(2, (2,))
    mine, theirs = pool.acquire(0), other.acquire(0)
    with pytest.raises(ValueError, match="block"):
        pool.release_many([mine, theirs])  # type: ignore[list-item]
    assert pool.free_count() == 1


def test_a_changed_batch_is_read_handle_by_handle() -> None:
    """acquire_many's list keeps its ids for release_many; once the list is changed (a handle
    dropped, replaced, or one of another pool put in), each handle is read again, as for any list."""
    pool, other = ThreadedBlockPool(6, (2,)), ThreadedBlockPool(2, (2,))
    batch = pool.acquire_many(3)
    assert batch is not None
    kept = batch.pop()
    assert pool.release_many(batch) == [True, True]
    assert kept.state is BlockState.ACQUIRED and pool.free_count() == 5

    batch = pool.acquire_many(2)
    assert batch is not None
    stranger = other.acquire(0)
    batch[1] = stranger  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="handed out by this pool"):
        pool.release_many(batch)
    batch[1] = kept
    with pytest.raises(ValueError, match="handed out by this pool"):
        other.release_many(batch)  # a whole batch of another pool
    assert pool.release_many(batch) == [True, True]
    assert pool.release_many(batch) == [False, False]  # the same batch again: a double release
    assert pool.free_count() == 5 and other.free_count() == 1


def test_non_contiguous_ids_are_zeroed_by_an_indexed_fill() -> None:
    """reset_many zeroes exactly the listed blocks, whether they form one run or not."""
    storage = BlockStorage(6, (2,), torch.float32, torch.device("cpu"))
    storage.tensor.fill_(1.0)
    storage.reset_many([4, 1])
    assert storage.tensor[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    storage.reset_many([2, 3])
    assert storage.tensor[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]


def test_async_release_many_matches_the_threaded_one() -> None:
    """The async pool's release_many returns the blocks, zeroed, and wakes waiters."""

    async def main() -> None:
        pool = AsyncBlockPool(2, (2,))
        first, second = await pool.acquire(0), await pool.acquire(0)
        assert first is not None and second is not None
        first.data.fill_(3.0)
        got: list[object] = []
        async with anyio.create_task_group() as tg:

            async def waiter() -> None:
                got.append(await pool.acquire(5))

            tg.start_soon(waiter)
            await anyio.sleep(0.01)
            assert await pool.release_many([first, second]) == [True, True]
        assert got[0] is not None and pool.free_count() == 1
        assert torch.count_nonzero(pool.storage) == 0

    anyio.run(main)


class _OfferThenResetPool(ThreadedBlockPool):
    """Planted: offers the blocks, then resets them (the seed's warning, batched)."""

    def release_many(self, blocks):  # type: ignore[no-untyped-def]
        unwrapped = [self._unwrap(block) for block in blocks]
        with self._lock:
            steps = [self._core.begin_release(i, g, 0.0) for i, g in unwrapped]
            last = [i for (i, _), step in zip(unwrapped, steps, strict=True) if step is ReleaseStep.LAST]
            for block_id in last:
                self._core.finish_release(block_id)
            self._not_empty.notify(len(last))
        self._storage.reset_many(last)
        return [step is ReleaseStep.LAST for step in steps]


def _tenant_keeps_its_data(factory: type[ThreadedBlockPool]) -> None:
    """One thread frees a sequence's two blocks while another takes one and writes it: what the
    second wrote must still be there once both are done (no reset lands on a new tenant)."""
    pool = factory(2, (4,))
    a, b = pool.acquire(0), pool.acquire(0)
    assert a is not None and b is not None
    seen: list[float] = []

    def tenant() -> None:
        block = pool.acquire(5)
        assert block is not None
        block.data.fill_(9.0)
        seen.append(float(block.data.sum()))
        freer.join()
        seen.append(float(block.data.sum()))

    freer = spawn(lambda: pool.release_many([a, b]), name="freer")
    spawn(tenant, name="tenant").join()
    if seen[0] != seen[1]:
        raise AssertionError(f"the new tenant's data changed from {seen[0]} to {seen[1]} (reset after offer)")


@pytest.mark.parametrize(("factory", "clean"), [(ThreadedBlockPool, True), (_OfferThenResetPool, False)])
def test_reset_before_offer_under_the_controlled_scheduler(
    factory: type[ThreadedBlockPool], clean: bool
) -> None:
    """PCT over the two threads: the correct pool never loses a tenant's data; the planted one does."""
    result = explore_threads(
        lambda: _tenant_keeps_its_data(factory),
        PCTScheduler(depth=3, seed=1),
        max_executions=300,
        modules=[_threaded, _storage, __name__],
    )
    assert (result.failure is None) is clean, result.failure
