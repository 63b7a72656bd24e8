"""A pool may refuse a double release by raising, as ``threading.BoundedSemaphore`` refuses one
release too many and vLLM's allocators refuse a double free: that is as good as ``False``, so
long as nothing changed. Before, any exception from such a release was a ``crash`` finding,
a false alarm on a correct pool written that common way."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test
from machine_settings import ci

import kvstress
from kvstress import InvariantViolation, ThreadedBlockPool
from kvstress.harness import PoolDriver
from kvstress.mutants import ThreadConditionPool


class RaisingThreadPool(ThreadConditionPool):
    """Correct: a release of a block it does not hold raises ValueError ("double free")."""

    def release(self, block):  # type: ignore[no-untyped-def]
        with self._cond:
            if block.refcount < 1:
                raise ValueError(f"double free of block {block.id}")
        return super().release(block)


class RaisingAfterQueueingPool(ThreadConditionPool):
    """Planted: on a double free it queues the block again, then raises."""

    def release(self, block):  # type: ignore[no-untyped-def]
        with self._cond:
            if block.refcount < 1:
                self._free.append(block)  # BUG: the block is queued twice
                raise ValueError(f"double free of block {block.id}")
        return super().release(block)


def test_a_double_release_refused_by_raising_is_not_a_finding() -> None:
    driver = PoolDriver(RaisingThreadPool, num_blocks=2)
    try:
        block = driver.acquire("h0", 0)
        assert block is not None
        driver.release("h0", block)
        driver.double_release("h0", block)  # raises nothing: the pool refused it
        driver.check_quiet()
    finally:
        driver.close()


def _double_release_finding(pool_class: type) -> str:
    """The invariant a sequential double release of a block on ``pool_class`` is reported under."""
    driver = PoolDriver(pool_class, num_blocks=2)
    try:
        block = driver.acquire("h0", 0)
        assert block is not None
        driver.release("h0", block)
        with pytest.raises(InvariantViolation) as caught:
            driver.double_release("h0", block)
        return caught.value.invariant
    finally:
        driver.close()


def test_a_double_release_that_raises_after_changing_the_pool_is_still_found() -> None:
    assert _double_release_finding(RaisingAfterQueueingPool) == "double-release"


def test_the_machine_is_silent_on_a_pool_that_raises_on_a_double_release() -> None:
    machine = kvstress.pool_machine(RaisingThreadPool)
    run_state_machine_as_test(machine, settings=ci(40))


def test_a_release_of_a_held_block_that_raises_is_still_a_crash() -> None:
    """Only a release of a block nobody holds may refuse by raising."""

    class Broken(ThreadedBlockPool):
        def release(self, block):  # type: ignore[no-untyped-def]
            raise ValueError("no")

    driver = PoolDriver(Broken, num_blocks=1)
    try:
        block = driver.acquire("h0", 0)
        with pytest.raises(InvariantViolation) as caught:
            driver.release("h0", block)
        assert caught.value.invariant == "crash"
    finally:
        driver.close()


class OutOfMemoryOnDoubleFreePool(ThreadConditionPool):
    """Planted: the pool runs out of memory in a release (here, one of a block it does not hold,
    where a refusal by raising would be accepted)."""

    def release(self, block):  # type: ignore[no-untyped-def]
        with self._cond:
            if block.refcount < 1:
                raise MemoryError("out of memory")
        return super().release(block)


def test_a_double_release_that_runs_out_of_memory_is_a_crash() -> None:
    """A MemoryError is the pool failing, not a refusal: CI once saw a pool that dies of memory on
    its 50th release go unreported when that release was a double one."""
    assert _double_release_finding(OutOfMemoryOnDoubleFreePool) == "crash"
