"""The bookkeeping of a tiered pool: PoolCore's states and counters, a free queue that prefers the core.

Ids below ``core_blocks`` are the core tier: they keep PoolCore's FIFO ring, so a pool under
light load cycles through the core only. Elastic ids wait in a min-heap and go out lowest
first, only when no core id is free: the elastic tier grows only under load, and packing it
into its lowest segments lets the highest ones fall idle and be given back.

Invariants, between two calls, beyond PoolCore's (the ring and the heap together are the free
queue; ``free_count`` equals their total length):
- the ring holds only core ids and the heap only elastic ids;
- ``free_ids()`` lists them in the order ``take`` would hand them out.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from kvstress.pool._core import PoolCore
from kvstress.pool._leaks import LeakTracker
from kvstress.pool._state import BlockState

_FREE = int(BlockState.FREE)
_RELEASING = int(BlockState.RELEASING)


class TieredCore(PoolCore):
    """PoolCore whose free queue hands out core ids first (FIFO), then elastic ids (lowest first)."""

    __slots__ = ("_elastic", "core_blocks")

    def __init__(self, num_blocks: int, core_blocks: int, leaks: LeakTracker) -> None:
        super().__init__(num_blocks, leaks)
        self.core_blocks = core_blocks
        self._ring_len = core_blocks  # the ring starts as 0..num_blocks-1: keep the core ids
        self._elastic = list(range(core_blocks, num_blocks))  # sorted, so already a heap

    def take(self, now: float, holder: object) -> int:
        """Hand out a free core block, else the lowest free elastic one; -1 when none is free."""
        if self._ring_len == 0:
            if not self._elastic:
                return -1
            # The ring is empty: the elastic id becomes its head, and PoolCore.take does the
            # rest (the state change, the counters, the tenancy), exactly as for a core block.
            self._ring[self._head] = heapq.heappop(self._elastic)
            self._ring_len = 1
        return super().take(now, holder)

    def _pop_free(self, n: int) -> Sequence[int]:
        """The next ``n`` ids in hand-out order: core ids from the ring, then the lowest elastic ids."""
        from_ring = min(n, self._ring_len)
        if from_ring == n:
            return super()._pop_free(n)
        block_ids = list(super()._pop_free(from_ring)) if from_ring else []
        block_ids.extend(heapq.heappop(self._elastic) for _ in range(n - from_ring))
        return block_ids

    def finish_release(self, block_id: int) -> None:
        """RELEASING -> FREE and offer: a core id to the back of the ring, an elastic id to the heap.

        Call only after the block's memory is reset.
        """
        if block_id < self.core_blocks:
            super().finish_release(block_id)
            return
        self._cas(block_id, _RELEASING, _FREE, "offer")
        heapq.heappush(self._elastic, block_id)
        self.free_count += 1

    def finish_release_many(self, block_ids: Sequence[int]) -> None:
        """``finish_release`` for each block: the core's to the ring, the elastic ones to the heap."""
        for block_id in block_ids:
            self.finish_release(block_id)

    def free_ids(self) -> list[int]:
        """The free queue in hand-out order: the core ring, then the elastic ids ascending."""
        return super().free_ids() + sorted(self._elastic)
