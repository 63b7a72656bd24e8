"""Pools whose bug shows only past hundreds of operations (the ``history`` slice).

``CompactingPool`` re-sorts its free list every ``COMPACT_EVERY`` releases, under its lock:
correct. ``CompactsIntoOldListPool`` (BUG) builds the sorted list and goes on appending to the
old one: the block of every hundredth release is lost.

``TenancyHandlePool`` gives each tenancy a handle of its own, checked by a tenancy number:
correct. ``TenancyByteHandlePool`` (BUG) keeps the number in a byte: a handle of 256 tenancies
ago passes for the current one, and acts on the new holder's block.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger
from kvstress.pool._state import BlockState


class CompactingPool(BlockLedger):
    """A condition-guarded free deque, sorted by id every ``COMPACT_EVERY`` releases."""

    threaded = True
    backoff_bound = 0.0
    COMPACT_EVERY = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = threading.Condition()
        self._releases = 0

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._cond:
            self._releases += 1
            free = self._free
            if self._releases % self.COMPACT_EVERY == 0:
                self._free = deque(sorted(free, key=lambda b: b.id))
            self._offer(free, block)
            self._cond.notify()
        return True

    def _offer(self, before: deque[Block], block: Block) -> None:
        self._free.append(block)


class CompactsIntoOldListPool(CompactingPool):
    """BUG: the block released as the list is compacted goes to the list just replaced."""

    def _offer(self, before: deque[Block], block: Block) -> None:
        before.append(block)


class _Handle:
    __slots__ = ("block", "tenancy")

    def __init__(self, block: Block, tenancy: int) -> None:
        self.block, self.tenancy = block, tenancy

    @property
    def id(self) -> int:
        return self.block.id

    @property
    def data(self) -> Any:
        return self.block.data

    @property
    def state(self) -> BlockState:
        return self.block.state

    @property
    def refcount(self) -> int:
        return self.block.refcount


class TenancyHandlePool(BlockLedger):
    """A handle per tenancy; a call through one whose tenancy has ended is refused."""

    threaded = True
    backoff_bound = 0.0
    TENANCY_MASK: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = threading.Condition()
        self._tenancy = dict.fromkeys(range(self.num_blocks), 0)

    def _live(self, handle: _Handle) -> bool:
        return handle.tenancy == self._tenancy[handle.id] and handle.block.refcount >= 1

    def acquire(self, timeout: float | None = None) -> _Handle | None:
        timeout = seconds(timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                return None
            block = self._taken(self._free.popleft())
            tenancy = self._tenancy[block.id] + 1
            if self.TENANCY_MASK is not None:
                tenancy &= self.TENANCY_MASK
            self._tenancy[block.id] = tenancy
            return _Handle(block, tenancy)

    def mark_in_use(self, handle: _Handle) -> None:  # type: ignore[override]
        with self._cond:
            if not self._live(handle):
                raise ValueError(f"block {handle.id}: that tenancy has ended")
            super().mark_in_use(handle.block)

    def retain(self, handle: _Handle) -> None:  # type: ignore[override]
        with self._cond:
            if not self._live(handle):
                raise ValueError(f"block {handle.id}: that tenancy has ended")
            super().retain(handle.block)

    def release(self, handle: _Handle) -> bool:
        with self._cond:
            if not self._live(handle) or not self._last_reference(handle.block):
                return False
            self._reset(handle.block)
            self._free.append(handle.block)
            self._cond.notify()
            return True


class TenancyByteHandlePool(TenancyHandlePool):
    """BUG: the tenancy number is kept in a byte, and wraps at 256."""

    TENANCY_MASK = 0xFF
