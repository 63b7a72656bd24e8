"""A first-come, first-served weighted semaphore of blocks, in the manner of Go's
``x/sync/semaphore.Weighted``: waiters are granted strictly in arrival order, and a release
stops at the first waiter that does not fit, so a batch waiter at the front keeps a single one
behind it waiting even while a block is free (fair, and correct, as long as the front waiter's
departure lets the others on).

``FifoWeightedPool`` is correct: a waiter that gives up at the front wakes those behind it.
``FifoWeightedFrontLeavesPool`` (BUG, golang/go#37852, fixed by CL 223418) only removes itself:
the single waiter behind it sleeps out its timeout beside the free block.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class _Waiter:
    __slots__ = ("blocks", "n", "ready")

    def __init__(self, n: int) -> None:
        self.n, self.ready, self.blocks = n, threading.Event(), list[Block]()


class FifoWeightedPool(BlockLedger):
    """Waiters in arrival order; a release grants from the front while the front fits."""

    threaded = True
    backoff_bound = 0.0
    wakes_behind = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        timeout = seconds(timeout)
        with self._lock:
            if len(self._free) >= n and not self._waiters:
                return [self._taken(self._free.popleft()) for _ in range(n)]
            if timeout == 0:
                return None
            waiter = _Waiter(n)
            self._waiters.append(waiter)
        if waiter.ready.wait(timeout):
            return waiter.blocks
        with self._lock:
            if waiter.ready.is_set():  # granted as it gave up: keep what it was given
                return waiter.blocks
            at_front = self._waiters[0] is waiter
            self._waiters.remove(waiter)
            if at_front and self.wakes_behind:
                self._grant()
            return None

    def acquire(self, timeout: float | None = None) -> Block | None:
        got = self.acquire_many(1, timeout)
        return None if got is None else got[0]

    def _grant(self) -> None:
        """With the lock held: grant the waiters from the front while the front one fits."""
        while self._waiters and len(self._free) >= self._waiters[0].n:
            waiter = self._waiters.popleft()
            waiter.blocks = [self._taken(self._free.popleft()) for _ in range(waiter.n)]
            waiter.ready.set()

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._lock:
            self._free.append(block)
            self._grant()
        return True


class FifoWeightedFrontLeavesPool(FifoWeightedPool):
    """BUG: a front waiter that gives up wakes nobody behind it."""

    wakes_behind = False
