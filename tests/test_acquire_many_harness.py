"""acquire_many in the harness: the model's view of a batch, the driver's checks, the corpus pools."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import kvstress
from kvstress import InvariantViolation, Operation, PoolDriver
from kvstress.linearize import check_history
from kvstress.linearize._model import Kind, part_index, translate
from kvstress.mutants import (
    AsyncFifoBatchPool,
    BatchShortGrantPool,
    BatchStarvesAtExactlyNPool,
    CondvarBatchPool,
    CondvarPool,
)


def op(
    index: int,
    name: str,
    args: dict[str, Any],
    start: float,
    end: float | None,
    result: Any,
    outcome: str = "ok",
) -> Operation:
    """One history operation."""
    return Operation(index, f"w{index}", name, args, start, end, outcome, result)


def test_a_batch_is_n_acquires_of_its_blocks() -> None:
    """An answered batch maps to one ACQUIRE per block, each under the batch's index."""
    model = translate([op(0, "acquire_many", {"n": 2, "timeout": 0}, 1.0, 2.0, [1, 0])], 3)
    assert [[(o.index, o.kind) for o in ops] for ops in model.blocks] == [
        [(0, Kind.ACQUIRE)],
        [(0, Kind.ACQUIRE)],
        [],
    ]


def test_a_refused_batch_assumes_an_empty_pool_only_for_one_block() -> None:
    """None from acquire_many(1) is an empty-pool instant; from acquire_many(2), no constraint,
    only two wildcards in its call (a FIFO-fair pool may have kept blocks for it meanwhile)."""
    one = translate([op(0, "acquire_many", {"n": 1, "timeout": 0}, 1.0, 2.0, None, "info")], 2)
    two = translate([op(0, "acquire_many", {"n": 2, "timeout": 0}, 1.0, 2.0, None, "info")], 2)
    assert len(one.empties) == 1 and not two.empties and len(two.wildcards) == 2
    assert all(w.hi < 1 << 62 for w in two.wildcards)  # settled: within its call


def test_a_cancelled_batch_is_n_wildcards_with_distinct_indices() -> None:
    """A batch whose answer is unknown may have taken n blocks: n wildcards, each its own index."""
    model = translate([op(5, "acquire_many", {"n": 3, "timeout": None}, 1.0, 2.0, "cancelled", "info")], 4)
    assert sorted(w.index for w in model.wildcards) == sorted(part_index(5, k) for k in range(3))
    assert len({w.index for w in model.wildcards}) == 3 and part_index(5, 0) == 5


def test_a_batch_of_the_wrong_size_is_bad() -> None:
    """A batch answering fewer blocks than asked, or one twice, is an answer no pool may give."""
    short = translate([op(0, "acquire_many", {"n": 2, "timeout": 0}, 1.0, 2.0, [0])], 2)
    twice = translate([op(0, "acquire_many", {"n": 2, "timeout": 0}, 1.0, 2.0, [0, 0])], 2)
    assert short.bad and twice.bad


def test_a_batch_history_linearizes_and_a_block_taken_twice_does_not() -> None:
    """A batch, its releases and a later acquire are linearizable; a batch taking a held block is not."""
    fine = [
        op(0, "acquire_many", {"n": 2, "timeout": 0}, 1.0, 2.0, [0, 1]),
        op(1, "release", {"block": 0}, 3.0, 4.0, True),
        op(2, "release", {"block": 1}, 3.0, 4.0, True),
        op(3, "acquire", {"timeout": 0}, 5.0, 6.0, 0),
    ]
    assert check_history(fine, 2).status == "ok"
    clash = [
        op(0, "acquire", {"timeout": 0}, 1.0, 2.0, 0),
        op(1, "acquire_many", {"n": 2, "timeout": 0}, 3.0, 4.0, [0, 1]),
    ]
    assert check_history(clash, 2).status == "violation"


def test_a_cancelled_batch_in_flight_explains_an_empty_pool() -> None:
    """An acquire answering None while a batch of 2 is in flight (then cancelled) is no finding:
    the batch may have held both blocks then."""
    history = [
        op(0, "acquire_many", {"n": 2, "timeout": None}, 1.0, 4.0, "cancelled", "info"),
        op(1, "acquire", {"timeout": 0}, 2.0, 3.0, None, "info"),
    ]
    assert check_history(history, 2).status == "ok"


def test_the_driver_checks_a_batch_and_knows_who_has_acquire_many() -> None:
    """Our pool's batch passes every check; a pool without acquire_many is not asked for one."""
    driver = PoolDriver(kvstress.ThreadedBlockPool, num_blocks=3)
    try:
        assert driver.has_acquire_many
        ids = driver.acquire_many("h0", 2, 0)
        assert ids is not None and len(set(ids)) == 2
        assert driver.acquire_many("h1", 2, 0) is None
        driver.check_quiet()
        for block_id in ids:
            driver.release("h0", block_id)
        driver.drain()
    finally:
        driver.close()
    plain = PoolDriver(CondvarPool, num_blocks=2)
    try:
        assert not plain.has_acquire_many
    finally:
        plain.close()


def test_the_driver_names_a_short_batch() -> None:
    """A batch of fewer blocks than asked is a lost-block finding."""
    driver = PoolDriver(BatchShortGrantPool, num_blocks=2)
    try:
        assert driver.acquire("h0", 0) is not None
        with pytest.raises(InvariantViolation) as caught:
            driver.acquire_many("h1", 2, 0)
        assert caught.value.invariant == "lost-block" and "all n blocks or None" in caught.value.message
    finally:
        driver.close()


def test_the_batch_probe_passes_a_correct_pool() -> None:
    """A batch waiter on an exhausted pool is served once its blocks are released."""
    driver = PoolDriver(CondvarBatchPool, num_blocks=2)
    try:
        held = [driver.acquire("h0", 0), driver.acquire("h0", 0)]
        got = driver.probe_batch_wakeup("h1", "h0", [b for b in held if b is not None])
        assert got is not None and sorted(got) == [0, 1]
    finally:
        driver.close()


def test_the_condvar_batch_pool_is_all_or_nothing() -> None:
    """CondvarBatchPool hands out n blocks or None, and a bad n is a ValueError naming n."""
    pool = CondvarBatchPool(3, (2,))
    batch = pool.acquire_many(2, 0)
    assert batch is not None and len(batch) == 2
    assert pool.acquire_many(2, 0) is None and pool.free_count() == 1
    with pytest.raises(ValueError, match="n must be"):
        pool.acquire_many(4)


@pytest.mark.anyio
async def test_the_fifo_batch_pool_serves_in_arrival_order(anyio_backend: str) -> None:
    """A batch at the head of the line is served before a single acquirer who came later."""
    pool = AsyncFifoBatchPool(2, (2,))
    held = await pool.acquire_many(2, 0)
    assert held is not None
    order: list[str] = []

    async def batch() -> None:
        assert await pool.acquire_many(2, 5) is not None
        order.append("batch")

    async def single() -> None:
        got = await pool.acquire(5)
        order.append("single")
        assert got is not None

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(batch)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(single)
            await anyio.wait_all_tasks_blocked()
            await pool.release(held[0])  # one free: the single acquirer waits its turn
            await anyio.wait_all_tasks_blocked()
            assert order == []
            await pool.release(held[1])
            await anyio.wait_all_tasks_blocked()
            assert order == ["batch"]
            for block in pool._blocks:
                if block.refcount:
                    await pool.release(block)
    assert order == ["batch", "single"]


def test_the_batch_probe_catches_a_batch_starving_beside_its_blocks() -> None:
    """A batch waiter that keeps waiting while exactly its n blocks are free is a lost-wakeup."""
    driver = PoolDriver(BatchStarvesAtExactlyNPool, num_blocks=2)
    try:
        held = [driver.acquire("h0", 0), driver.acquire("h0", 0)]
        with pytest.raises(InvariantViolation) as caught:
            driver.probe_batch_wakeup("h1", "h0", [b for b in held if b is not None])
        assert caught.value.invariant == "lost-wakeup"
    finally:
        driver.close()
