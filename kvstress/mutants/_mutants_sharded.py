"""Mutants of ``ShardedPool`` (threads, striped free lists): each plants one bug; ``# BUG`` marks it.

``expected`` names the invariant ids a good harness may report for the bug: the one it causes
first, and the ones its consequences show as when a check meets them first.
"""

from __future__ import annotations

import threading
import time

from kvstress.mutants._block import HELD, Block, seconds
from kvstress.mutants._sharded_pool import ShardedPool
from kvstress.pool._state import BlockState


class ShardedCountOutsideLockPool(ShardedPool):
    """Release lists the block under its stripe's lock and bumps the stripe's count after
    dropping it, to keep the section short: an acquirer that takes the block in between has its
    decrement overwritten, and the count drifts from the stripe."""

    expected = ("counter-mismatch",)

    def _offer(self, block: Block) -> None:
        stripe = block.id % len(self._stripes)
        with self._locks[stripe]:
            block.state = BlockState.FREE
            self._stripes[stripe].append(block.id)
        self._counts[stripe] += 1  # BUG: a read-modify-write outside the stripe's lock


class ShardedScanThenParkPool(ShardedPool):
    """A waiter looks at the stripes, then takes the condition's lock and parks without looking
    again: a release that lists a block and notifies in between finds nobody parked yet, and
    the waiter sleeps to its timeout beside a free block."""

    expected = ("lost-wakeup", "hang")

    def acquire(self, timeout: float | None = None) -> Block | None:
        limit = seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            block = self._settled_scan()
            if block is not None or limit == 0:
                return block
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            with self._cond:  # BUG: the stripes are not looked at again under the lock
                self._cond.wait(remaining)


class ShardedListBeforeResetPool(ShardedPool):
    """Release lists the block FREE on its stripe and zeroes it afterwards, outside the stripe's
    lock: an acquirer in between takes the old K/V, or has its own data zeroed."""

    expected = ("dirty-read", "shared-block")

    def release(self, block: Block) -> bool:
        if not self._unpin(block):
            return False
        self._offer(block)
        block.data.zero_()  # BUG: the block is already listed
        self._wake()
        return True


class ShardedCallerStripeLockPool(ShardedPool):
    """Release drops the reference under the lock of the stripe the block will be listed on
    *next*, chosen by the cursor, not the block's own stripe: two sharers releasing together hold
    different locks, and the refcount loses an update."""

    expected = ("double-release", "queue-corruption", "refcount", "lost-block", "shared-block", "crash")

    def _unpin(self, block: Block) -> bool:
        lock: threading.Lock = self._locks[next(self._cursor) % len(self._locks)]
        with lock:  # BUG: the block's state is guarded by self._lock_of(block)
            if block.state not in HELD or block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
            return True


class ShardedNotifyBeforeListPool(ShardedPool):
    """Release notifies first and lists the block after: the woken waiter looks, finds nothing,
    and parks again; the block is then listed with nobody told."""

    expected = ("lost-wakeup", "hang")

    def release(self, block: Block) -> bool:
        if not self._unpin(block):
            return False
        block.data.zero_()
        self._wake()  # BUG: before the block is listed
        self._offer(block)
        return True
