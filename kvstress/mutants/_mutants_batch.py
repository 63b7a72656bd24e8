"""Mutants of the ``acquire_many`` pools: each plants one bug of a batch; ``# BUG`` marks it."""

from __future__ import annotations

import time

import anyio

from kvstress.mutants._batch_pools import AsyncFifoBatchPool, CondvarBatchPool, batch_size
from kvstress.mutants._block import Block, seconds


class BatchPartialGrantLeakPool(CondvarBatchPool):
    """The batch takes blocks one at a time as they come, to be first in line for each; when
    the time runs out it answers None and forgets the blocks it had already taken. Taking them
    as they come, it also waits holding them: two batch waiters without a time limit can each
    hold part of the pool for ever (``hang``, the two-batch-waiters motif)."""

    expected = ("lost-block", "hang")

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        n, limit = batch_size(n, self.num_blocks), seconds(timeout)
        taken: list[Block] = []
        with self._lock:
            deadline = None if limit is None else time.monotonic() + limit
            while len(taken) < n:
                if self._free:
                    taken.append(self._take())
                    continue
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None  # BUG: the blocks in ``taken`` stay ACQUIRED, held by nobody
                self._wait(remaining)
            return taken


class BatchShortGrantPool(CondvarBatchPool):
    """When fewer than n blocks are free, the batch hands out what there is rather than wait
    ("the caller can ask again for the rest"): all or nothing is broken."""

    expected = ("lost-block",)

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        n, limit = batch_size(n, self.num_blocks), seconds(timeout)
        with self._lock:
            if self._free:
                return [self._take() for _ in range(min(n, len(self._free)))]  # BUG: may be < n
            if not self._until_enough(n, limit):
                return None
            return [self._take() for _ in range(n)]


class BatchStarvesAtExactlyNPool(CondvarBatchPool):
    """The batch's wait condition is off by one (``<=`` for ``<``): with exactly n blocks free
    it keeps waiting, and starves forever if no more come."""

    expected = ("lost-block", "lost-wakeup", "hang")

    def _until_enough(self, n: int, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._free) <= n:  # BUG: should be < n
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._wait(remaining)
        return True


class AsyncBatchCancelLeakPool(AsyncFifoBatchPool):
    """Having taken its batch, acquire_many yields once (to let other tasks run) before it
    returns; a cancellation at that yield leaves the batch ACQUIRED, held by nobody."""

    expected = ("lost-block",)

    async def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        blocks = await super().acquire_many(n, timeout)
        await anyio.lowlevel.checkpoint()  # BUG: a cancellation here loses the batch
        return blocks
