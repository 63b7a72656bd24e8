"""Correct pools with ``acquire_many``, of two designs a harness must both pass: one serves a
batch whenever n blocks are free (single acquirers are never held back), one serves every
caller, batch or single, strictly in arrival order (FIFO-fair: a batch at the head holds the
others back). Both are all or nothing, and a cancelled or timed-out call holds nothing."""

from __future__ import annotations

import time
from collections import deque

import anyio

from kvstress.mutants._async_pool import AsyncConditionPool
from kvstress.mutants._block import Block, seconds
from kvstress.mutants._condvar_pool import CondvarPool


def batch_size(n: object, num_blocks: int) -> int:
    """An int in 0..num_blocks (more could never come); ValueError naming n otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= num_blocks:
        raise ValueError(f"n must be an int in 0..num_blocks ({num_blocks}), got {n!r}")
    return n


class CondvarBatchPool(CondvarPool):
    """``CondvarPool`` with ``acquire_many``: a batch waits, holding nothing, until n blocks
    are free at once, and takes them under the lock. Every offer wakes every waiter (each
    re-checks its own need), so no waiter sleeps while what it needs is free."""

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        """n FREE blocks at once, ACQUIRED and zeroed; None (holding nothing) after ``timeout`` s."""
        n, limit = batch_size(n, self.num_blocks), seconds(timeout)
        with self._lock:
            if not self._until_enough(n, limit):
                return None
            return [self._take() for _ in range(n)]

    def _until_enough(self, n: int, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._free) < n:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._wait(remaining)
        return True

    def _wake(self) -> None:
        self._not_empty.notify_all()


class AsyncFifoBatchPool(AsyncConditionPool):
    """``AsyncConditionPool`` where acquires, single or batch, are served in arrival order: a
    caller takes only at the head of the line and only once its n blocks are free. Taking has
    no await after it, so a cancelled call holds nothing; leaving the line wakes the next."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._line: deque[object] = deque()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """``acquire_many(1)``: a single acquire waits its turn like a batch."""
        blocks = await self.acquire_many(1, timeout)
        return None if blocks is None else blocks[0]

    async def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        """n FREE blocks at once, in arrival order; None (holding nothing) after ``timeout`` s."""
        n = batch_size(n, self.num_blocks)
        deadline = self._deadline(seconds(timeout))
        ticket = object()
        async with self._cond:
            self._line.append(ticket)
            try:
                while self._line[0] is not ticket or len(self._free) < n:
                    remaining = None if deadline is None else deadline - anyio.current_time()
                    if remaining is not None and remaining <= 0:
                        return None
                    await self._wait(remaining)
                return [self._take() for _ in range(n)]
            finally:
                self._line.remove(ticket)
                self._cond.notify_all()  # the next in line may be served now

    async def _wait(self, remaining: float | None) -> None:
        with anyio.move_on_after(remaining):
            await self._cond.wait()

    def _wake(self) -> None:
        self._cond.notify_all()
