"""Tiny threaded pools for the scheduler's headline tests: one correct, two with a classic race.

Written as a user would (a lock, a condition, a deque, one object per block), so the controlled
thread scheduler is shown to work on code it was not built around: nothing here knows about it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

import torch

from kvstress import BlockState


class Block:
    """One block of the test's tiny pools."""

    def __init__(self, block_id: int, data: torch.Tensor) -> None:
        self.id, self.data, self.state, self.refcount = block_id, data, BlockState.FREE, 0


class TinyPool:
    """A small correct threaded pool, written for this test: one lock, a deque, no waiting."""

    backoff_bound = 0.0

    def __init__(
        self, num_blocks: int, block_shape: Sequence[int], *, dtype: torch.dtype, device: object = None
    ) -> None:
        memory = torch.zeros((num_blocks, *block_shape), dtype=dtype)
        self.num_blocks = num_blocks
        self._blocks = [Block(i, memory[i]) for i in range(num_blocks)]
        self._free = deque(self._blocks)
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)

    def acquire(self, timeout: float | None = None) -> Block | None:
        with self._lock:
            if not self._free and not self._not_empty.wait_for(lambda: self._free, timeout):
                return None
            return self._take()

    def _take(self) -> Block:
        block = self._free.popleft()
        block.state, block.refcount = BlockState.ACQUIRED, 1
        return block

    def mark_in_use(self, block: Block) -> None:
        with self._lock:
            if block.state != BlockState.ACQUIRED:
                raise ValueError("not acquired")
            block.state = BlockState.IN_USE

    def retain(self, block: Block) -> None:
        with self._lock:
            if block.refcount < 1:
                raise ValueError("not held")
            block.refcount += 1

    def release(self, block: Block) -> bool:
        with self._lock:
            if block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount:
                return False
            block.state = BlockState.RELEASING
            self._recycle(block)
            return True

    def _recycle(self, block: Block) -> None:
        block.data.zero_()
        block.state = BlockState.FREE
        self._free.append(block)
        self._not_empty.notify()

    def free_count(self) -> int:
        return len(self._free)

    def free_ids(self) -> list[int]:
        return [b.id for b in self._free]


class TinyResetAfterOfferPool(TinyPool):
    """The seed's warning: the block is offered, the lock dropped, and only then zeroed."""

    def release(self, block: Block) -> bool:
        with self._lock:
            if block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount:
                return False
            block.state = BlockState.FREE
            self._free.append(block)  # BUG: offered before its reset
            self._not_empty.notify()
        block.data.zero_()
        return True


class TinyCheckThenPollPool(TinyPool):
    """Looks at the queue outside the lock, then polls it inside, without looking again."""

    def acquire(self, timeout: float | None = None) -> Block | None:
        if self._free:
            with self._lock:
                return self._take()  # BUG: another acquirer may have emptied it meanwhile
        return super().acquire(timeout)


class TinyStrictPool(TinyPool):
    """Correct: a double release is refused by raising (as ``threading.BoundedSemaphore`` refuses
    one release too many, and vLLM's allocators a double free); the reset runs between two lock
    sections, outside the lock."""

    def release(self, block: Block) -> bool:
        with self._lock:
            if block.refcount < 1:
                raise RuntimeError(f"block {block.id} released twice")
            block.refcount -= 1
            if block.refcount:
                return False
            block.state = BlockState.RELEASING
        block.data.zero_()
        with self._lock:
            block.state = BlockState.FREE
            self._free.append(block)
            self._not_empty.notify()
        return True
