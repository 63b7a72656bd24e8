"""Batches over a run of consecutive ids: the core changes them by slices, and says "a run" by
handing the ids over as a ``range``; everything else takes the per-block path. Both must agree."""

from __future__ import annotations

import pytest
import torch

from kvstress import LeakDetection, ThreadedBlockPool, TieredBlockPool
from kvstress.pool._block import BlockBatch
from kvstress.pool._core import as_run
from kvstress.pool._storage import HOST_COPY_MAX_BYTES, HostStorage


def test_as_run_names_exactly_the_consecutive_ascending_ids() -> None:
    assert as_run([3, 4, 5]) == range(3, 6) and type(as_run([3, 4, 5])) is range
    for not_a_run in ([3, 5, 4], [3, 3, 5], [5, 4, 3], [3, 6]):
        assert type(as_run(not_a_run)) is list
    assert as_run([]) == [] and as_run(range(2, 4)) == range(2, 4)


def test_a_batch_is_a_run_only_where_the_queue_holds_that_run() -> None:
    """The free queue in order 0..5 gives a run; once freed out of order it gives the ids as
    queued, each block checked and handed out one by one, and both tenancies stay exact."""
    pool = ThreadedBlockPool(6, (2,))
    first = pool.acquire_many(6, 0)
    assert isinstance(first, BlockBatch) and type(first._ids) is range
    pool.release_many([first[i] for i in (2, 0, 1, 5, 3, 4)])
    second = pool.acquire_many(3, 0)
    assert isinstance(second, BlockBatch) and type(second._ids) is list
    assert [b.id for b in second] == [2, 0, 1]
    third = pool.acquire_many(3, 0)  # the queue's next three, 5 3 4: no run either
    assert third is not None and [b.id for b in third] == [5, 3, 4]
    assert {b.generation for b in second} == {second[0].generation} != {third[0].generation}
    assert pool.release_many(first) == [False] * 6  # every handle of the first tenancy is stale
    assert pool.release_many(second) == [True] * 3 and pool.release_many(third) == [True] * 3
    assert pool.free_count() == 6 and sorted(pool.free_ids()) == list(range(6))


def test_a_batch_across_the_end_of_the_queue_is_taken_block_by_block() -> None:
    pool = ThreadedBlockPool(8, (2,))
    head = pool.acquire_many(6, 0)
    assert head is not None
    pool.release_many(head)  # the queue now runs 6 7 0 1 2 3 4 5: the next batch wraps
    batch = pool.acquire_many(4, 0)
    assert batch is not None and [b.id for b in batch] == [6, 7, 0, 1]
    assert all(b.state.name == "ACQUIRED" and b.refcount == 1 for b in batch)
    assert pool.release_many(batch) == [True] * 4 and pool.free_count() == 8


def test_a_run_of_mixed_tenancies_is_released_by_slices_with_each_generation_checked() -> None:
    """Blocks taken one at a time (each its own tenancy) and released together: one run, every
    generation compared; a stale handle among them spoils the run, and the per-block path
    refuses exactly that one."""
    pool = ThreadedBlockPool(4, (2,))
    singles = [pool.acquire(0) for _ in range(4)]
    assert all(b is not None for b in singles)
    assert len({b.generation for b in singles if b is not None}) == 4
    assert pool.release_many(singles) == [True] * 4  # type: ignore[arg-type]
    again = [pool.acquire(0) for _ in range(4)]  # blocks 0..3 again, new tenancies
    mixed = [again[0], again[1], singles[2], again[3]]
    assert pool.release_many(mixed) == [True, True, False, True]  # type: ignore[arg-type]
    assert pool.metrics()["double_release_count"] == 1 and pool.free_count() == 3


def test_a_sampled_stack_in_a_released_run_is_forgotten() -> None:
    pool = ThreadedBlockPool(16, (2,), leak_sample_rate=3)
    batch = pool.acquire_many(16, 0)
    assert batch is not None
    leaks = pool._core.leaks
    assert [b.id for b in batch if leaks.stack_of(b.id)] == [0, 3, 6, 9, 12, 15]
    pool.release_many(batch)
    assert not leaks.tracked and all(leaks.holder_of(i) is None for i in range(16))
    paranoid = ThreadedBlockPool(4, (2,), leak_detection=LeakDetection.PARANOID, leak_threshold=60)
    held = paranoid.acquire_many(4, 0)
    assert held is not None
    paranoid.release_many(held)
    assert not paranoid._core.leaks.tracked


@pytest.mark.parametrize("count", [1, 8, 64])
def test_a_host_batch_is_zeroed_whether_reset_under_the_lock_or_not(count: int) -> None:
    """A run small enough is zeroed under the lock, a larger one outside it: each all zeros,
    the bytes just past the run untouched."""
    shape = (HOST_COPY_MAX_BYTES // 16,)  # 16 KiB a float32 block: 64 blocks pass the bound
    pool = ThreadedBlockPool(count + 1, shape)
    storage = pool._storage
    assert isinstance(storage, HostStorage)
    assert storage.resets_many_under_lock(count) is (count * 16 * 1024 <= 4 * HOST_COPY_MAX_BYTES)
    batch = pool.acquire_many(count, 0)
    neighbour = pool.acquire(0)
    assert batch is not None and neighbour is not None
    for block in [*batch, neighbour]:
        block.data.fill_(3.0)
    assert pool.release_many(batch) == [True] * count
    assert torch.count_nonzero(pool.storage[:count]) == 0
    assert bool((neighbour.data == 3.0).all())


def test_a_tiered_batch_reaching_into_the_elastic_tier_is_a_list() -> None:
    pool = TieredBlockPool(4, (2,), core_blocks=2)
    batch = pool.acquire_many(4, 0)
    assert batch is not None and [b.id for b in batch] == [0, 1, 2, 3]
    assert pool.release_many(batch) == [True] * 4 and pool.free_count() == 4
