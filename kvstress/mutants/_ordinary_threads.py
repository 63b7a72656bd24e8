"""Correct threaded pools written the ordinary way on ``threading`` and ``queue``.

A BoundedSemaphore and a deque, a Condition (and one made at import, module-level), a LIFO
queue of blocks, and a pool that polls with capped exponential backoff. Timeouts are seconds
on ``time.monotonic``; 0 tries once.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ledger import BlockLedger


class ThreadSemaphorePool(BlockLedger):
    """A deque of free blocks guarded by ``threading.BoundedSemaphore(num_blocks)``: a unit is
    taken before the block, and given back after it is queued."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._units = threading.BoundedSemaphore(self.num_blocks)

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        if not self._units.acquire(blocking=timeout != 0, timeout=None if timeout == 0 else timeout):
            return None
        return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and give the unit back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._units.release()
        return True


class ThreadConditionPool(BlockLedger):
    """A deque under a ``threading.Condition``: waiters ``wait_for`` a free block, a release
    notifies one."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = threading.Condition()

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: bool(self._free), timeout):
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and notify one waiter."""
        with self._cond:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._cond.notify()
        return True

    def free_count(self) -> int:
        """Blocks in the deque."""
        with self._cond:
            return len(self._free)

    def free_ids(self) -> list[int]:
        """The deque's ids, head first."""
        with self._cond:
            return [block.id for block in self._free]


_FREED = threading.Condition()
"""ThreadModuleConditionPool's condition, made at import and shared by every instance."""


class ThreadModuleConditionPool(BlockLedger):
    """ThreadConditionPool with its Condition made at import, a module-level global as many
    codebases keep one. Instances share it, so a release wakes every waiter (each rechecks its
    own deque)."""

    threaded = True
    backoff_bound = 0.0

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        with _FREED:
            if not _FREED.wait_for(lambda: bool(self._free), timeout):
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and wake the waiters."""
        with _FREED:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            _FREED.notify_all()
        return True

    def free_count(self) -> int:
        """Blocks in the deque."""
        with _FREED:
            return len(self._free)

    def free_ids(self) -> list[int]:
        """The deque's ids, head first."""
        with _FREED:
            return [block.id for block in self._free]


class ThreadQueuePool(BlockLedger):
    """The free blocks are the items of a ``queue.LifoQueue`` (the warmest block first); a
    mirror deque under the ledger's lock gives the snapshot (a queue keeps its own to itself)."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queue: queue.LifoQueue[Block] = queue.LifoQueue()
        for block in self._free:  # the ledger's deque mirrors the primitive's contents
            self._queue.put(block)

    def acquire(self, timeout: float | None = None) -> Block | None:
        """The queue's next block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        try:
            block = self._queue.get(block=timeout != 0, timeout=None if timeout == 0 else timeout)
        except queue.Empty:
            return None
        with self._guard:
            self._free.remove(block)
        return self._taken(block)

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset and put it back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._put(block)
        return True

    def _put(self, block: Block) -> None:
        with self._guard:
            self._free.append(block)
        self._queue.put(block)

    def free_count(self) -> int:
        """The queue's size."""
        return self._queue.qsize()

    def free_ids(self) -> list[int]:
        """The queued ids, the next one out first."""
        with self._guard:
            return [block.id for block in reversed(self._free)]


class ThreadPollingPool(BlockLedger):
    """A deque under a lock; a waiter that finds it empty sleeps and looks again, backing off
    from 50 us to at most 1 ms, until its deadline. It declares that cap as its backoff bound."""

    threaded = True
    backoff_bound = 0.001
    first_park = 50e-6

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        park = self.first_park
        while True:
            with self._lock:
                if self._free:
                    return self._taken(self._free.popleft())
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            time.sleep(park if deadline is None else min(park, deadline - now))
            park = min(park * 2, self.backoff_bound)

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset and queue it."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._lock:
            self._free.append(block)
        return True

    def free_count(self) -> int:
        """Blocks in the deque."""
        with self._lock:
            return len(self._free)

    def free_ids(self) -> list[int]:
        """The deque's ids, head first."""
        with self._lock:
            return [block.id for block in self._free]
