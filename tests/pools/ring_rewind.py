"""A ring of free ids whose indexes never wrap but are rewound past a threshold, one producer
(release) and one consumer (acquire) at a time, each under its own lock.

``RingRewindPool`` has the consumer rewind both indexes once its own passes twice the ring's
size (BUG): the producer's ``tail += 1`` under the other lock races the consumer's ``tail -=``,
and an update is lost: blocks reappear in the queue, or vanish. The race opens only after four
acquires on a pool of two blocks, past every short motif; the churn motif reaches it.
``RingWrapPool`` keeps each index modulo twice the size, each side wrapping only its own.
"""

from __future__ import annotations

import threading
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class RingRewindPool(BlockLedger):
    """Free ids in a ring; the consumer rewinds both indexes (BUG)."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ring = [block.id for block in self._blocks]
        self._head, self._tail = 0, self.num_blocks  # the ring starts full
        self._producer = threading.Lock()
        self._consumer = threading.Condition()

    def _count(self) -> int:
        return self._tail - self._head

    def _pop(self) -> int:
        block_id = self._ring[self._head % self.num_blocks]
        self._head += 1
        if self._head >= 2 * self.num_blocks:
            self._head -= 2 * self.num_blocks
            self._tail -= 2 * self.num_blocks
        return block_id

    def _push(self, block_id: int) -> None:
        self._ring[self._tail % self.num_blocks] = block_id
        self._tail += 1

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        with self._consumer:
            if not self._consumer.wait_for(lambda: self._count() > 0, timeout):
                return None
            return self._taken(self._blocks[self._pop()])

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._producer:
            self._push(block.id)
        with self._consumer:
            self._consumer.notify()
        return True

    def free_count(self) -> int:
        return self._count()

    def free_ids(self) -> list[int]:
        head, count = self._head, self._count()
        return [self._ring[(head + k) % self.num_blocks] for k in range(count)]


class RingWrapPool(RingRewindPool):
    """Each index kept modulo twice the ring's size, each side wrapping only its own."""

    def _count(self) -> int:
        return (self._tail - self._head) % (2 * self.num_blocks)

    def _pop(self) -> int:
        block_id = self._ring[self._head % self.num_blocks]
        self._head = (self._head + 1) % (2 * self.num_blocks)
        return block_id

    def _push(self, block_id: int) -> None:
        self._ring[self._tail % self.num_blocks] = block_id
        self._tail = (self._tail + 1) % (2 * self.num_blocks)
