"""Correct threaded pools that make their blocks on demand, as object and connection pools do.

A block is "made" the first time a caller needs one and none is idle, up to ``num_blocks``; a
block not made yet counts as free (``free_count`` and ``free_ids`` include it), so a pool with
blocks left to make may not refuse a caller. Two ways to make one:

- inline, by the caller that found none idle (fast-object-pool, commons-pool's ``create``);
- by a maker thread of the pool's own, that a waiter asks for a block and then waits for it to
  appear among the idle ones (HikariCP's add-connection executor).

Timeouts are seconds on ``time.monotonic``; 0 tries once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ledger import BlockLedger


class LazyQueuePool(BlockLedger):
    """Idle blocks are the items of a ``queue.Queue``; a caller that finds none idle makes the
    next block under a lock, and keeps it. Only when every block is made does it wait on the
    queue."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle: queue.Queue[Block] = queue.Queue()
        self._make_lock = threading.Lock()
        self._made = 0

    def acquire(self, timeout: float | None = None) -> Block | None:
        """An idle block, else a new one, else one released within ``timeout`` seconds."""
        timeout = seconds(timeout)
        try:
            return self._taken(self._idle.get_nowait())
        except queue.Empty:
            pass
        made = self._make()
        if made is not None:
            return self._keep(made, timeout)
        return self._wait_idle(timeout)

    def _keep(self, made: Block, timeout: float | None) -> Block | None:
        """The block just made, handed to its maker."""
        return self._taken(made)

    def _make(self) -> Block | None:
        """The next block not made yet, or None when all are."""
        with self._make_lock:
            if self._made == self.num_blocks:
                return None
            self._made += 1
            return self._blocks[self._made - 1]

    def _wait_idle(self, timeout: float | None) -> Block | None:
        try:
            if timeout == 0:
                return self._taken(self._idle.get_nowait())
            return self._taken(self._idle.get(timeout=timeout))
        except queue.Empty:
            return None

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset and put it back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._idle.put(block)
        return True

    def free_count(self) -> int:
        """Idle blocks and blocks not made yet."""
        with self._make_lock:
            return self._idle.qsize() + self.num_blocks - self._made

    def free_ids(self) -> list[int]:
        """The idle ids, the next one out first, then the ids not made yet."""
        with self._make_lock:
            unmade = [block.id for block in self._blocks[self._made :]]
            with self._idle.mutex:
                return [block.id for block in self._idle.queue] + unmade


class MakerThreadPool(BlockLedger):
    """Idle blocks in a deque under a ``threading.Condition``. A waiter that finds none asks a
    maker thread for a block (while fewer are asked for than wait) and waits; it asks again when
    it wakes to find the block taken. The maker waits for asks on a second condition over the
    same lock (a notify meant for an acquirer never wakes it), starts with the first ask and
    retires after ``IDLE_S`` with nothing asked. A try-once acquire makes its block inline."""

    threaded = True
    backoff_bound = 0.0
    IDLE_S = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unmade = self._free
        self._idle: deque[Block] = deque()
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._asks = threading.Condition(lock)  # the maker's, over the same lock
        self._waiting = 0  # acquirers parked on the condition
        self._asked = 0  # blocks asked of the maker and not made yet
        self._maker: threading.Thread | None = None

    def acquire(self, timeout: float | None = None) -> Block | None:
        """An idle block, or one made for the caller, or None after ``timeout`` seconds."""
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if not self._idle and timeout == 0:
                return self._taken(self._unmade.popleft()) if self._unmade else None
            self._waiting += 1
            try:
                while not self._idle:
                    if self._unmade and self._asked < self._waiting:
                        self._ask()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    self._cond.wait(left)
                return self._taken(self._idle.popleft())
            finally:
                self._waiting -= 1

    def _ask(self) -> None:
        """Ask the maker for one block (under the condition's lock), starting it if need be."""
        self._asked += 1
        if self._maker is None:
            self._maker = threading.Thread(target=self._make_loop, name="pool-maker", daemon=True)
            self._maker.start()
        else:
            self._asks.notify()

    def _make_loop(self) -> None:
        with self._cond:
            while True:
                if not self._asked:
                    if not self._asks.wait(self.IDLE_S) and not self._asked:
                        self._maker = None
                        return
                    continue
                self._asked -= 1
                if self._wanted():
                    self._idle.append(self._unmade.popleft())
                    self._cond.notify()

    def _wanted(self) -> bool:
        """Whether to make a block for the ask just taken: while any is left to make."""
        return bool(self._unmade)

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, add it to the idle ones and wake a waiter."""
        with self._cond:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._idle.append(block)
            self._cond.notify()
        return True

    def free_count(self) -> int:
        """Idle blocks and blocks not made yet."""
        with self._cond:
            return len(self._idle) + len(self._unmade)

    def free_ids(self) -> list[int]:
        """The idle ids, the next one out first, then the ids not made yet."""
        with self._cond:
            return [block.id for block in self._idle] + [block.id for block in self._unmade]
