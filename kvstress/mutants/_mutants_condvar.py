"""Mutants of ``CondvarPool`` (threads): each plants one realistic bug; ``# BUG`` marks it.

``expected`` names the invariant ids a good harness may report for the bug: the one it causes
first, and the ones its consequences show as when a check meets them first.
"""

from __future__ import annotations

import time

from kvstress.mutants._block import HELD, Block, seconds
from kvstress.mutants._condvar_pool import CondvarPool
from kvstress.pool._state import BlockState


class ResetAfterOfferPool(CondvarPool):
    """Release queues the block, drops the lock, and only then zeroes it (to keep a big memset out
    of the critical section): an acquirer in between gets the old K/V, or has its own zeroed."""

    expected = ("dirty-read", "shared-block")

    def _reset(self, block: Block) -> None:
        pass  # done by release once the lock is dropped, below

    def release(self, block: Block) -> bool:
        returned = super().release(block)
        if returned:
            block.data.zero_()  # BUG: the block is already back in the queue
        return returned


class PartialResetPool(CondvarPool):
    """The reset slices the flattened block with an exclusive end one short: the last element
    keeps the previous tenant's value."""

    expected = ("dirty-read",)

    def _reset(self, block: Block) -> None:
        block.data.view(-1)[: block.data.numel() - 1].zero_()  # BUG: should be [:]


class CheckThenPollPool(CondvarPool):
    """Acquire looks at the queue without the lock and, seeing a block, pops under the lock
    without looking again: another acquirer may have emptied it meanwhile (IndexError)."""

    expected = ("crash",)

    def acquire(self, timeout: float | None = None) -> Block | None:
        seconds(timeout)
        if self._free:  # the common case never waits: skip the condition
            with self._lock:
                return self._take()  # BUG: the queue was not checked again under the lock
        return super().acquire(timeout)


class RetainLostUpdatePool(CondvarPool):
    """Retain validates and reads the refcount before taking the lock and writes ``read + 1``
    under it. A sharer's release in between is undone (the block is never returned); another
    retain in between is lost (the block is returned while a sharer still holds it)."""

    expected = ("refcount", "lost-block", "shared-block")

    def retain(self, block: Block) -> None:
        refs = block.refcount
        if block.state not in HELD or refs < 1:
            raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
        with self._lock:
            block.refcount = refs + 1  # BUG: read-modify-write split around the lock


class PreferredBlockPool(CondvarPool):
    """Acquire prefers the most recently freed block (its lines are still cached): it looks it up
    without the lock, then pins it under the lock as a prefix cache's ``touch`` does, without
    checking that it is still free. Two acquirers can pin the same block."""

    expected = ("shared-block", "refcount", "dirty-read")

    def acquire(self, timeout: float | None = None) -> Block | None:
        seconds(timeout)
        preferred = self._free[-1] if self._free else None
        if preferred is None:
            return super().acquire(timeout)
        with self._lock:
            return self._pin(preferred)  # BUG: time of check (above) is not time of use

    def _pin(self, block: Block) -> Block:
        if block.refcount == 0:  # the first pin takes it off the free queue
            self._free.remove(block)
            self._count -= 1
        block.state = BlockState.ACQUIRED
        block.refcount += 1
        return block


class FullTimeoutEachWakePool(CondvarPool):
    """A waiter woken for a block that another acquirer took first waits its whole timeout again,
    not what is left of it: a timed acquire can return long after its deadline."""

    expected = ("timeout-late",)

    def _until_free(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._free:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self._wait(timeout)  # BUG: should be deadline - now
        return True


class SilentReleasePool(CondvarPool):
    """Release queues the block but notifies nobody: a waiter sleeps out its whole timeout beside
    a free block (and takes it only at its deadline)."""

    expected = ("lost-wakeup",)

    def _wake(self) -> None:
        pass  # BUG: self._not_empty.notify() is missing


class NoneMeansTryOncePool(CondvarPool):
    """acquire reads its timeout with ``if not timeout:`` to mean "do not wait": a timeout of
    None (no limit) gives up at once at an exhausted pool, where its caller waits for ever."""

    expected = ("timeout-early",)

    def _until_free(self, timeout: float | None) -> bool:
        if not timeout:  # BUG: None (no limit) is taken for 0 (try once)
            return bool(self._free)
        return super()._until_free(timeout)


class LockLeakPool(CondvarPool):
    """Release takes the lock by hand, and the early return for a block that is still shared
    skips the unlock at the bottom: the next operation on the pool blocks forever."""

    expected = ("hang",)

    def release(self, block: Block) -> bool:
        self._lock.acquire()
        if block.state not in HELD or block.refcount < 1:
            self._lock.release()
            return False
        block.refcount -= 1
        if block.refcount > 0:
            return False  # BUG: returns with the lock held
        self._recycle(block)
        self._lock.release()
        return True
