"""``acquire_many`` that takes its blocks one at a time and waits holding those it has
(hold-and-wait): two batch callers can each end up with part of the pool, waiting for ever for
the other's part while nobody holds a block. A blind user's design; the fuzz missed it in
30 s. ``TakeAllAtOncePool`` is the same pool taking a batch only when all of it is free."""

from __future__ import annotations

from kvstress.mutants import Block
from tests.pools._condition import ConditionPool


class TakeAllAtOncePool(ConditionPool):
    """A deque and a Condition; ``acquire_many`` waits until ``n`` are free, then takes them."""

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        if not isinstance(n, int) or not 0 <= n <= self.num_blocks:
            raise ValueError(f"n must be an int in 0..{self.num_blocks}, got {n!r}")
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._free) >= n, timeout):
                return None
            return [self._taken(self._free.popleft()) for _ in range(n)]


class HoldAndWaitPool(TakeAllAtOncePool):
    """Takes each block as it comes, and waits for the next holding those it has."""

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        if not isinstance(n, int) or not 0 <= n <= self.num_blocks:
            raise ValueError(f"n must be an int in 0..{self.num_blocks}, got {n!r}")
        got: list[Block] = []
        with self._changed:
            for _ in range(n):
                if not self._changed.wait_for(lambda: self._free, timeout):  # BUG: holding `got`
                    for block in got:
                        block.state, block.refcount = block.state.FREE, 0
                        self._free.append(block)
                    self._changed.notify_all()
                    return None
                got.append(self._taken(self._free.popleft()))
            return got
