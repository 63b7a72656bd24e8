"""Pools whose bug shows only past hundreds of operations (the ``history`` slice).

``CompactingPool`` re-sorts its free list every ``COMPACT_EVERY`` offers, under its lock:
correct. ``CompactsIntoOldListPool`` (BUG) builds the sorted list and offers the block of that
release to the old one: every hundredth block is lost.

``TenancyByteHandlePool`` (BUG) is ``TenancyHandlePool`` (a handle per tenancy, checked by its
tenancy number) keeping the number in a byte: a handle of 256 tenancies ago passes for the
current one, and acts on the new holder's block.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kvstress import BlockState
from kvstress.mutants import Block, CondvarPool
from tests.pools.tenancy_handles import Handle, TenancyHandlePool


class CompactingPool(CondvarPool):
    """CondvarPool whose free deque is sorted by id every ``COMPACT_EVERY`` offers."""

    COMPACT_EVERY = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._offers = 0

    def _offer(self, block: Block) -> None:
        self._offers += 1
        if self._offers % self.COMPACT_EVERY == 0:
            self._free = deque(sorted(self._free, key=lambda free: free.id))
        super()._offer(block)


class CompactsIntoOldListPool(CompactingPool):
    """BUG: the block offered as the list is compacted goes to the list just replaced."""

    def _offer(self, block: Block) -> None:
        old = self._free
        self._offers += 1
        if self._offers % self.COMPACT_EVERY == 0:
            self._free = deque(sorted(old, key=lambda free: free.id))
        block.state = BlockState.FREE
        old.append(block)
        self._count += 1
        self._wake()


class TenancyByteHandlePool(TenancyHandlePool):
    """BUG: the tenancy number is kept in a byte, and wraps at 256."""

    def _take(self) -> Handle:
        handle = super()._take()  # under the pool's lock
        handle.generation = self._generations[handle.id] = handle.generation & 0xFF
        return handle
