"""kvstress.audit under real threads: silent on correct pools used correctly, seeded and bounded."""

from __future__ import annotations

import contextlib
import queue
import random
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

import kvstress
from kvstress import AuditedBlock, AuditedPool, InvariantViolation
from kvstress.mutants import CondvarPool, PollingCasPool, ShardedPool
from kvstress.mutants._ordinary_background import HousekeepingThreadPool
from kvstress.mutants._ordinary_threads import (
    ThreadConditionPool,
    ThreadPollingPool,
    ThreadQueuePool,
    ThreadSemaphorePool,
)

THREADS, STEPS, BLOCKS = 4, 150, 3

FACTORIES: dict[str, Callable[[], Any]] = {
    "ThreadedBlockPool": lambda: kvstress.ThreadedBlockPool(BLOCKS, (2, 4)),
    "TieredBlockPool": lambda: kvstress.TieredBlockPool(BLOCKS, (2, 4), core_blocks=1, idle_shrink_s=0.0),
    "CondvarPool": lambda: CondvarPool(BLOCKS, (2, 4)),
    "PollingCasPool": lambda: PollingCasPool(BLOCKS, (2, 4)),
    "ShardedPool": lambda: ShardedPool(BLOCKS, (2, 4)),
    "ThreadConditionPool": lambda: ThreadConditionPool(BLOCKS, (2, 4)),
    "ThreadSemaphorePool": lambda: ThreadSemaphorePool(BLOCKS, (2, 4)),
    "ThreadQueuePool": lambda: ThreadQueuePool(BLOCKS, (2, 4)),
    "ThreadPollingPool": lambda: ThreadPollingPool(BLOCKS, (2, 4)),
    "HousekeepingThreadPool": lambda: HousekeepingThreadPool(BLOCKS, (2, 4)),
}


def worker(pool: AuditedPool, rng: random.Random, handoff: queue.Queue[AuditedBlock]) -> None:
    """A seeded program of protocol calls, each made correctly: references are only ever given
    up once, some of them by another thread (a hand-off through ``handoff``)."""
    held: list[AuditedBlock] = []
    for _ in range(STEPS):
        roll = rng.random()
        if roll < 0.35 and len(held) < 2:
            block = pool.acquire(rng.choice([0, 0, 0.002]))
            if block is not None:
                if rng.random() < 0.5:
                    pool.mark_in_use(block)
                block.data.fill_(float(rng.randint(1, 9)))
                held.append(block)
        elif roll < 0.45 and held:
            block = rng.choice(held)
            pool.retain(block)
            handoff.put(block)  # another thread releases this reference
        elif roll < 0.55:
            with contextlib.suppress(queue.Empty):
                pool.release(handoff.get_nowait())
        elif held:
            pool.release(held.pop(rng.randrange(len(held))))
    for block in held:
        pool.release(block)


def run_threads(pool: AuditedPool, seed: int) -> None:
    handoff: queue.Queue[AuditedBlock] = queue.Queue()
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            worker(pool, random.Random(seed * 100 + i), handoff)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,), name=f"w{i}") for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a worker hung"
    assert not errors, errors[0]
    while not handoff.empty():
        pool.release(handoff.get_nowait())


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("seed", [0, 1])
def test_silent_on_correct_pools_under_threads(name: str, seed: int) -> None:
    """Four threads share blocks and hand references across: no violation, and close() passes."""
    bare = FACTORIES[name]()
    pool = kvstress.audit(bare, queue_check_every=8)
    try:
        run_threads(pool, seed)
        pool.close()
    finally:
        if hasattr(bare, "close"):
            bare.close()


def test_a_leak_on_a_worker_thread_names_that_thread() -> None:
    """A block a worker thread never releases is listed under that thread's name at close()."""
    pool = kvstress.audit(kvstress.ThreadedBlockPool(2, (2,)))

    def leaky_request() -> None:
        block = pool.acquire(0)
        assert block is not None
        block.data.fill_(1.0)  # ...and an early return forgets the release

    thread = threading.Thread(target=leaky_request, name="request-7")
    thread.start()
    thread.join(10)
    with pytest.raises(InvariantViolation, match=r"acquired by request-7; 1 reference left") as caught:
        pool.close()
    assert "in leaky_request" in caught.value.message


def test_a_double_release_racing_on_two_threads_is_caught_once() -> None:
    """Two threads release the same single reference: exactly one of them gets double-release."""
    pool = kvstress.audit(kvstress.ThreadedBlockPool(1, (2,)))
    block = pool.acquire(0)
    assert block is not None
    barrier = threading.Barrier(2)
    found: list[str] = []

    def release() -> None:
        barrier.wait(10)
        try:
            pool.release(block)
        except InvariantViolation as violation:
            found.append(violation.invariant)

    threads = [threading.Thread(target=release) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert found == ["double-release"]
    assert pool.free_count() == 1


def test_quiet_checks_under_contention_are_silent() -> None:
    """Four threads in tight acquire/release loops, a full queue check at every quiet point: silent.

    A quiet check once judged the live leases after its reads, and a release begun meanwhile
    made a correct pool's refcount look wrong; it must judge the leases as they were."""
    pool = kvstress.audit(kvstress.ThreadedBlockPool(2, (2,)), queue_check_every=1)
    errors: list[BaseException] = []

    def body() -> None:
        try:
            for _ in range(1500):
                block = pool.acquire(None)
                assert block is not None
                pool.release(block)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: more interleavings in the same steps
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    pool.close()


class _RetainThenWait(kvstress.ThreadedBlockPool):
    """Its retain takes effect, then waits until the test's release has returned: a retain that
    raced the last release and reached the pool first (the pool keeps the block, refcount 1)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retained = threading.Event()
        self.released = threading.Event()

    def retain(self, block: Any) -> None:
        super().retain(block)
        self.retained.set()
        self.released.wait(10)


def test_a_retain_racing_the_last_release_is_the_callers_bug_and_the_pool_is_not_blamed() -> None:
    """The race is reported as the caller's (illegal-transition), and the block the pool rightly
    keeps for the retained reference is not then called leaked by the pool at a quiet point (a
    blind user's run said "(a pool bug)" there): it is held outside the audit until it is back."""
    inner = _RetainThenWait(2, (2,))
    pool = kvstress.audit(inner, queue_check_every=1)
    block = pool.acquire(0)
    assert block is not None
    found: list[InvariantViolation] = []

    def share() -> None:
        try:
            pool.retain(block)
        except InvariantViolation as violation:
            found.append(violation)

    sharer = threading.Thread(target=share)
    sharer.start()
    assert inner.retained.wait(10)
    assert pool.release(block) is False  # the pool counted the retain first
    inner.released.set()
    sharer.join(10)
    assert [v.invariant for v in found] == ["illegal-transition"]
    assert "(a caller bug)" in str(found[0])
    other = pool.acquire(0)  # a quiet point after it: the kept block is not blamed on the pool
    assert other is not None and other.id != block.id
    pool.release(other)
