"""A correct threaded pool of the textbook kind: one lock, one condition, a deque of blocks."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

import torch

from kvstress.mutants._block import HELD, Block, allocate, seconds
from kvstress.pool._state import BlockState


class CondvarPool:
    """Threads. One ``threading.Lock`` guards everything; waiters sleep on a ``Condition``.

    Invariants, under the lock: ``_free`` holds exactly the FREE blocks, each once, and
    ``_count == len(_free)``; a block is zeroed before it enters ``_free``. Each release that
    returns a block notifies one waiter, and a waiter looks at the queue after every wake-up,
    timed out or not, so a block freed as its deadline passes is still taken.

    Timeouts are seconds on ``time.monotonic`` (looked up at each call, so a controlled run can
    swap it for a virtual clock); ``None`` waits without limit and ``0`` tries once.
    """

    backoff_bound = 0.0  # waiters park and are notified: no lateness beyond scheduling

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self._blocks = allocate(num_blocks, block_shape, dtype, device)
        self.num_blocks = len(self._blocks)
        self._free: deque[Block] = deque(self._blocks)
        self._count = self.num_blocks
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)

    # -- the protocol ------------------------------------------------------------------------

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None after ``timeout`` s."""
        limit = seconds(timeout)
        with self._lock:
            return self._take() if self._until_free(limit) else None

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE; ValueError from any other state."""
        with self._lock:
            if block.state is not BlockState.ACQUIRED:
                raise ValueError(f"mark_in_use needs ACQUIRED, got block {block.id} {block.state.name}")
            block.state = BlockState.IN_USE

    def retain(self, block: Block) -> None:
        """One more reference to a held block; ValueError for a block nobody holds."""
        with self._lock:
            if block.state not in HELD or block.refcount < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
            block.refcount += 1

    def release(self, block: Block) -> bool:
        """One reference less; True only when this call zeroed the block and queued it again.
        A block nobody holds (a double release) answers False and nothing changes."""
        with self._lock:
            return self._drop(block)

    def free_count(self) -> int:
        """The free counter, kept beside the queue: O(1)."""
        return self._count

    def free_ids(self) -> list[int]:
        """The free queue's ids, head first (a snapshot)."""
        with self._lock:
            return [block.id for block in self._free]

    # -- with the lock held ------------------------------------------------------------------

    def _until_free(self, timeout: float | None) -> bool:
        """True once the queue holds a block; False when ``timeout`` s have passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._free:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._wait(remaining)
        return True

    def _wait(self, remaining: float | None) -> None:
        self._not_empty.wait(remaining)

    def _take(self) -> Block:
        block = self._free.popleft()
        self._count -= 1
        block.state = BlockState.ACQUIRED
        block.refcount = 1
        return block

    def _drop(self, block: Block) -> bool:
        if block.state not in HELD or block.refcount < 1:
            return False
        block.refcount -= 1
        if block.refcount > 0:
            return False
        self._recycle(block)
        return True

    def _recycle(self, block: Block) -> None:
        block.state = BlockState.RELEASING
        self._reset(block)  # strictly before the offer: no acquirer may see the old K/V
        self._offer(block)

    def _reset(self, block: Block) -> None:
        block.data.zero_()

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._free.append(block)
        self._count += 1
        self._wake()

    def _wake(self) -> None:
        self._not_empty.notify()
