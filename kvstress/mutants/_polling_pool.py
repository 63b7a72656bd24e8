"""A correct threaded pool in the lock-free style: a deque of free ids, a CAS per block, polling."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

import torch

from kvstress.mutants._block import HELD, Block, allocate, seconds
from kvstress.pool._state import BlockState


class PollingCasPool:
    """Threads. No pool-wide lock: ``deque.append``/``popleft`` are atomic, and each block's state
    and refcount change only in a compare-and-set under that block's own tiny lock.

    An acquirer pops an id and claims the block with CAS FREE -> ACQUIRED; an empty poll sleeps
    and polls again, the sleep doubling from ``first_backoff`` to ``max_backoff`` and never
    running past the deadline. So a waiter is at most ``max_backoff`` late to a freed block:
    that is the declared ``backoff_bound``.

    Invariants: an id is pushed only after its block is zeroed and FREE, so a claim never fails
    (a failed one means the queue is corrupt, and acquire raises); the last release alone moves
    a block to RELEASING, so exactly one caller resets and pushes it; ``_count`` changes only
    under ``_count_lock``, after the push or the pop it mirrors, so it equals ``len(_free)``
    whenever no operation is in flight.
    """

    first_backoff = 0.0005  # seconds
    # 4 ms: polls this far apart cost about 1% of a core, and a 0.2 s wait takes some 50 of them,
    # well inside the budget of scheduling points a controlled run gives one execution.
    max_backoff = 0.004  # seconds
    backoff_bound = max_backoff

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
        self._free: deque[int] = deque(range(self.num_blocks))
        self._claims = [threading.Lock() for _ in self._blocks]  # one per block: the CAS
        self._count = self.num_blocks
        self._count_lock = threading.Lock()

    # -- the protocol ------------------------------------------------------------------------

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None after ``timeout`` s."""
        deadline = self._deadline(seconds(timeout))
        backoff = self.first_backoff
        while True:
            block = self._poll()
            if block is not None:
                return block
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            time.sleep(backoff if deadline is None else min(backoff, deadline - now))
            backoff = self._next_backoff(backoff)

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE; ValueError from any other state."""
        if not self._cas(block, BlockState.ACQUIRED, BlockState.IN_USE):
            raise ValueError(f"mark_in_use needs ACQUIRED, got block {block.id} {block.state.name}")

    def retain(self, block: Block) -> None:
        """One more reference to a held block; ValueError for a block nobody holds."""
        with self._claims[block.id]:
            if block.state not in HELD or block.refcount < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
            block.refcount += 1

    def release(self, block: Block) -> bool:
        """One reference less; True only when this call zeroed the block and queued it again.
        A block nobody holds (a double release) answers False and nothing changes."""
        if not self._unpin(block):
            return False
        self._reset(block)  # strictly before the push: no acquirer may see the old K/V
        self._cas(block, BlockState.RELEASING, BlockState.FREE)
        self._push(block)
        return True

    def free_count(self) -> int:
        """The free counter, kept beside the queue: O(1)."""
        return self._count

    def free_ids(self) -> list[int]:
        """The free queue's ids, head first (a snapshot)."""
        return list(self._free)

    # -- steps ---------------------------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + timeout

    def _next_backoff(self, backoff: float) -> float:
        return min(2 * backoff, self.max_backoff)

    def _poll(self) -> Block | None:
        """One look at the queue: the claimed block, or None when it was empty."""
        try:
            block_id = self._free.popleft()
        except IndexError:
            return None
        self._add_count(-1)
        return self._claim(self._blocks[block_id])

    def _claim(self, block: Block) -> Block:
        """CAS FREE -> ACQUIRED with refcount 1; the queue held a block that was not FREE: raise."""
        with self._claims[block.id]:
            if block.state is not BlockState.FREE:
                raise RuntimeError(f"free queue corrupt: it held block {block.id}, {block.state.name}")
            block.state = BlockState.ACQUIRED
            block.refcount = 1
        return block

    def _unpin(self, block: Block) -> bool:
        """Drop one reference; True when it was the last, and the block is now RELEASING and the
        caller's alone. A block nobody holds is left as it is (False)."""
        with self._claims[block.id]:
            if block.state not in HELD or block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
            return True

    def _reset(self, block: Block) -> None:
        block.data.zero_()

    def _push(self, block: Block) -> None:
        self._free.append(block.id)
        self._add_count(+1)

    def _cas(self, block: Block, expected: BlockState, new: BlockState) -> bool:
        with self._claims[block.id]:
            if block.state is not expected:
                return False
            block.state = new
            return True

    def _add_count(self, delta: int) -> None:
        with self._count_lock:
            self._count += delta
