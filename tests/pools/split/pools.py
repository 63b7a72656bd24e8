"""Correct pools built from the helpers of this package, and one with a race planted in a helper.

``SplitPool``: ``freelist.FreeList`` (a Condition, waits bounded by ``deadline.Deadline``) and
``block.LockedBlock`` (a lock per block). ``DataclassPool``: its Condition comes from
``field(default_factory=threading.Condition)``. ``AsyncSplitPool``: ``freelist.AsyncFreeList``.
``SplitLostCountPool``: its free list keeps a count beside the queue and updates it outside the
lock, a lost update that only a switch inside the helper's line reveals.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import torch

from kvstress import BlockState
from pools.split.block import LockedBlock, make_blocks
from pools.split.freelist import AsyncFreeList, CountedFreeList, FreeList
from pools.split.tally import Tally


class SplitPool:
    """A free list and a lock per block, each from a module of its own."""

    backoff_bound = 0.0

    def __init__(
        self,
        num_blocks: int,
        block_shape: tuple[int, ...],
        *,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
    ) -> None:
        self.num_blocks = num_blocks
        self._blocks = make_blocks(num_blocks, block_shape, dtype, device)
        self._free = self._free_list(self._blocks)

    def _free_list(self, blocks: list[LockedBlock]) -> FreeList:
        return FreeList(blocks)

    def acquire(self, timeout: float | None = None) -> LockedBlock | None:
        block = self._free.get(timeout)
        if block is None:
            return None
        with block.lock:
            block.state, block.refcount = BlockState.ACQUIRED, 1
        return block  # type: ignore[no-any-return]

    def mark_in_use(self, block: LockedBlock) -> None:
        with block.lock:
            if block.state is not BlockState.ACQUIRED:
                raise ValueError(f"block {block.id} is {block.state.name}, not ACQUIRED")
            block.state = BlockState.IN_USE

    def retain(self, block: LockedBlock) -> None:
        with block.lock:
            if block.refcount < 1:
                raise ValueError(f"block {block.id} is not held")
            block.refcount += 1

    def release(self, block: LockedBlock) -> bool:
        with block.lock:
            if block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount:
                return False
            block.state = BlockState.RELEASING
            block.data.zero_()
            block.state = BlockState.FREE
        self._free.put(block)
        return True

    def free_count(self) -> int:
        return len(self._free.snapshot())

    def free_ids(self) -> list[int]:
        return [block.id for block in self._free.snapshot()]


class SplitLostCountPool(SplitPool):
    """``SplitPool`` on a free list whose count is updated outside its lock (the bug is there)."""

    def _free_list(self, blocks: list[LockedBlock]) -> FreeList:
        return CountedFreeList(blocks)

    def free_count(self) -> int:
        return self._free.count  # type: ignore[attr-defined,no-any-return]


class TalliedPool(SplitPool):
    """``SplitPool`` whose free counter is a ``tally.Tally``, moved under a lock of the pool's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tally = Tally(self.num_blocks)
        self._tally_lock = threading.Lock()

    def acquire(self, timeout: float | None = None) -> LockedBlock | None:
        block = super().acquire(timeout)
        if block is not None:
            self._count(-1)
        return block

    def release(self, block: LockedBlock) -> bool:
        back = super().release(block)
        if back:
            self._count(1)
        return back

    def _count(self, delta: int) -> None:
        with self._tally_lock:
            self._tally.add(delta)

    def free_count(self) -> int:
        return self._tally.count


class TallyRacePool(TalliedPool):
    """The tally moved without the lock: two moves at once lose one (the race is in the helper,
    whose module imports nothing a scheduler would look for)."""

    def _count(self, delta: int) -> None:
        self._tally.add(delta)


@dataclass
class DataclassPool:
    """A dataclass whose Condition is a field's default factory."""

    num_blocks: int
    block_shape: tuple[int, ...]
    _: KW_ONLY
    dtype: torch.dtype = torch.float32
    device: Any = None
    _cv: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _free: deque[LockedBlock] = field(default_factory=deque, init=False, repr=False)
    backoff_bound = 0.0

    def __post_init__(self) -> None:
        self._free.extend(make_blocks(self.num_blocks, self.block_shape, self.dtype, self.device))

    def acquire(self, timeout: float | None = None) -> LockedBlock | None:
        with self._cv:
            if not self._cv.wait_for(lambda: self._free, timeout):
                return None
            block = self._free.popleft()
            block.state, block.refcount = BlockState.ACQUIRED, 1
            return block

    def mark_in_use(self, block: LockedBlock) -> None:
        with self._cv:
            if block.state is not BlockState.ACQUIRED:
                raise ValueError(f"block {block.id} is {block.state.name}, not ACQUIRED")
            block.state = BlockState.IN_USE

    def retain(self, block: LockedBlock) -> None:
        with self._cv:
            if block.refcount < 1:
                raise ValueError(f"block {block.id} is not held")
            block.refcount += 1

    def release(self, block: LockedBlock) -> bool:
        with self._cv:
            if block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount:
                return False
            block.state = BlockState.RELEASING
            block.data.zero_()
            block.state = BlockState.FREE
            self._free.append(block)
            self._cv.notify()
            return True

    def free_count(self) -> int:
        with self._cv:
            return len(self._free)

    def free_ids(self) -> list[int]:
        with self._cv:
            return [block.id for block in self._free]


class AsyncSplitPool:
    """An async pool on ``AsyncFreeList``, whose deadlines read ``time.monotonic``."""

    backoff_bound = 0.0

    def __init__(
        self,
        num_blocks: int,
        block_shape: tuple[int, ...],
        *,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
    ) -> None:
        self.num_blocks = num_blocks
        self._free = AsyncFreeList(make_blocks(num_blocks, block_shape, dtype, device))

    async def acquire(self, timeout: float | None = None) -> LockedBlock | None:
        block = self._free.get_nowait() if timeout == 0 else await self._free.get(timeout)
        if block is None:
            return None
        block.state, block.refcount = BlockState.ACQUIRED, 1
        return block  # type: ignore[no-any-return]

    def mark_in_use(self, block: LockedBlock) -> None:
        if block.state is not BlockState.ACQUIRED:
            raise ValueError(f"block {block.id} is {block.state.name}, not ACQUIRED")
        block.state = BlockState.IN_USE

    def retain(self, block: LockedBlock) -> None:
        if block.refcount < 1:
            raise ValueError(f"block {block.id} is not held")
        block.refcount += 1

    async def release(self, block: LockedBlock) -> bool:
        if block.refcount < 1:
            return False
        block.refcount -= 1
        if block.refcount:
            return False
        block.state = BlockState.RELEASING
        block.data.zero_()
        block.state = BlockState.FREE
        self._free.put_nowait(block)
        return True

    def free_count(self) -> int:
        return len(self._free.snapshot())

    def free_ids(self) -> list[int]:
        return [block.id for block in self._free.snapshot()]
