"""A correct threaded pool with striped free lists: one lock per stripe, one condition to park."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence

import torch

from kvstress.mutants._block import HELD, Block, allocate, seconds
from kvstress.pool._state import BlockState


class ShardedPool:
    """Threads. The free blocks are striped over ``stripes`` free lists, each behind its own
    lock, so acquirers that start on different stripes do not contend (the per-CPU free lists of
    memory allocators). An acquire starts on the next stripe of a round-robin cursor and tries
    each stripe once; finding none, it parks on the pool's one condition.

    Invariants: block ``i`` lives on stripe ``i % stripes``; its state and refcount, its place in
    that stripe's list and the stripe's count change only under that stripe's lock, so at rest
    ``_counts[s] == len(_stripes[s])`` and every listed block is FREE and zeroed. A release
    zeroes the block while it is RELEASING (its own alone, outside every lock), lists it, and
    only then notifies under the condition's lock. A waiter looks at the stripes again while it
    holds that lock, before every wait: so it either sees the block, or is parked by the time
    the notification can be sent.
    """

    stripes = 4
    backoff_bound = 0.0  # waiters park and are notified

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
        width = min(self.stripes, self.num_blocks)
        self._stripes: list[deque[int]] = [deque(range(s, self.num_blocks, width)) for s in range(width)]
        self._locks = [threading.Lock() for _ in range(width)]
        self._counts = [len(stripe) for stripe in self._stripes]
        self._offers = [0] * width  # per stripe, blocks listed on it so far (under its lock)
        self._cursor = itertools.count()  # next() is atomic: no lock, and deterministic
        self._cond = threading.Condition()

    # -- the protocol ------------------------------------------------------------------------

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None after ``timeout`` s."""
        limit = seconds(timeout)
        block = self._settled_scan()
        if block is not None or limit == 0:
            return block
        deadline = None if limit is None else time.monotonic() + limit
        with self._cond:
            while True:
                block = self._scan()
                if block is not None:
                    return block
                if deadline is None:
                    self._cond.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE; ValueError from any other state."""
        with self._lock_of(block):
            if block.state is not BlockState.ACQUIRED:
                raise ValueError(f"mark_in_use needs ACQUIRED, got block {block.id} {block.state.name}")
            block.state = BlockState.IN_USE

    def retain(self, block: Block) -> None:
        """One more reference to a held block; ValueError for a block nobody holds."""
        with self._lock_of(block):
            if block.state not in HELD or block.refcount < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
            block.refcount += 1

    def release(self, block: Block) -> bool:
        """One reference less; True only when this call zeroed the block and listed it again.
        A block nobody holds (a double release) answers False and nothing changes."""
        if not self._unpin(block):
            return False
        block.data.zero_()  # RELEASING: nobody else may touch it
        self._offer(block)
        self._wake()
        return True

    def free_count(self) -> int:
        """The stripes' counts, summed."""
        return sum(self._counts)

    def free_ids(self) -> list[int]:
        """The free ids, stripe by stripe (a snapshot)."""
        return [block_id for stripe in self._stripes for block_id in stripe]

    # -- steps ---------------------------------------------------------------------------------

    def _lock_of(self, block: Block) -> threading.Lock:
        return self._locks[block.id % len(self._locks)]

    def _scan(self) -> Block | None:
        """Each stripe once, from the cursor's: the claimed block, or None when all were empty."""
        width = len(self._stripes)
        home = next(self._cursor) % width
        for step in range(width):
            stripe = (home + step) % width
            if not self._stripes[stripe]:  # an unlocked peek only skips: it never takes
                continue
            with self._locks[stripe]:
                if self._stripes[stripe]:
                    return self._take(stripe)
        return None

    def _settled_scan(self) -> Block | None:
        """``_scan``, until one finds a block or none was listed anywhere while it looked: a
        scan can pass a stripe just before a release lists a block there, while an acquirer
        takes the last block from a stripe it has yet to reach, and a try-once then answered
        None though no instant had every block held (kvstress: lost-block, on the churn motif).
        With no listing during the scan, every stripe was empty at its end."""
        while True:
            listed = list(self._offers)
            block = self._scan()
            if block is not None or listed == self._offers:
                return block

    def _take(self, stripe: int) -> Block:
        """Pop from ``stripe`` (its lock held): FREE -> ACQUIRED, refcount 1."""
        block = self._blocks[self._stripes[stripe].popleft()]
        self._counts[stripe] -= 1
        block.state = BlockState.ACQUIRED
        block.refcount = 1
        return block

    def _unpin(self, block: Block) -> bool:
        """Drop one reference; True when it was the last, and the block is now RELEASING."""
        with self._lock_of(block):
            if block.state not in HELD or block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
            return True

    def _offer(self, block: Block) -> None:
        """List a zeroed RELEASING block on its stripe, FREE."""
        stripe = block.id % len(self._stripes)
        with self._locks[stripe]:
            block.state = BlockState.FREE
            self._stripes[stripe].append(block.id)
            self._counts[stripe] += 1
            self._offers[stripe] += 1

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()
