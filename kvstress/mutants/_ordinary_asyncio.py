"""Correct async pools written the ordinary way on asyncio's own primitives (asyncio only).

Each is what a developer writes first with the primitive at hand, cancel-safe because the
primitive is: a Semaphore and a deque, a Queue of blocks, a Condition (and one made at import,
module-level), a Lock with an Event.
Timeouts are ``asyncio.timeout`` on the loop's clock; 0 tries once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ledger import BlockLedger


class AsyncioSemaphorePool(BlockLedger):
    """A deque of free blocks guarded by ``asyncio.Semaphore(num_blocks)``: a unit per block.

    A released unit is handed to the first waiter (the semaphore is fair), and ``locked()``
    honours its queue, so a try-once fails while a hand-off is in flight.
    """

    backoff_bound = 0.0
    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._units = asyncio.Semaphore(self.num_blocks)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        if timeout == 0:
            if self._units.locked():
                return None
            await self._units.acquire()  # not locked: returns at once
        else:
            try:
                async with asyncio.timeout(timeout):
                    await self._units.acquire()
            except TimeoutError:
                return None
        return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and hand the unit on."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._units.release()
        return True


class AsyncioQueuePool(BlockLedger):
    """The free blocks are the items of an ``asyncio.Queue``; a mirror deque gives the snapshot
    (``asyncio.Queue`` has no public one), changed with no await between it and the queue."""

    backoff_bound = 0.0
    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queue: asyncio.Queue[Block] = asyncio.Queue()
        for block in self._free:  # the ledger's deque mirrors the primitive's contents
            self._queue.put_nowait(block)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """The queue's next block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        try:
            if timeout == 0:
                block = self._queue.get_nowait()
            else:
                async with asyncio.timeout(timeout):
                    block = await self._queue.get()
        except (asyncio.QueueEmpty, TimeoutError):
            return None
        self._free.remove(block)
        return self._taken(block)

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset and put it back."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._put(block)
        return True

    def _put(self, block: Block) -> None:
        self._queue.put_nowait(block)
        self._free.append(block)

    def free_count(self) -> int:
        """The queue's size."""
        return self._queue.qsize()


class AsyncioConditionPool(BlockLedger):
    """A deque under an ``asyncio.Condition``: waiters ``wait_for`` a free block; a release
    notifies one. A waiter cancelled after its notify passes it on, as a careful developer
    writes it (a Condition does not do it for them)."""

    backoff_bound = 0.0
    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = asyncio.Condition()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        try:
            return await self._acquire(timeout)
        except TimeoutError:
            return None

    async def _acquire(self, timeout: float | None) -> Block | None:
        async with self._cond:
            if not self._free:
                if timeout == 0:
                    return None
                try:
                    async with asyncio.timeout(timeout):
                        await self._cond.wait_for(lambda: bool(self._free))
                except (TimeoutError, asyncio.CancelledError):
                    # Before Python 3.13 a notified waiter that is cancelled (its timeout too)
                    # drops the notify: pass it on, or a waiter sleeps beside a free block.
                    if self._free:
                        self._cond.notify()
                    raise
            return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and notify one waiter."""
        async with self._cond:  # may wait for the lock: nothing has changed yet
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._cond.notify()
        return True


_FREED = asyncio.Condition()
"""AsyncioModuleConditionPool's condition, made at import and shared by every instance."""


class AsyncioModuleConditionPool(AsyncioConditionPool):
    """AsyncioConditionPool with its Condition made at import, a module-level global as a
    one-loop server may keep it (it binds to the loop it first waits on). Instances share it,
    so a release wakes every waiter (each rechecks its own deque)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self._cond  # the module's, looked up at each call

    async def _acquire(self, timeout: float | None) -> Block | None:
        async with _FREED:
            if not self._free:
                if timeout == 0:
                    return None
                async with asyncio.timeout(timeout):
                    await _FREED.wait_for(lambda: bool(self._free))
            return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and wake the waiters."""
        async with _FREED:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            _FREED.notify_all()
        return True


class AsyncioLockEventPool(BlockLedger):
    """A deque under an ``asyncio.Lock``, and an ``asyncio.Event`` set while a block is free:
    a waiter waits for the event, then takes the lock and looks again."""

    backoff_bound = 0.0
    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = asyncio.Lock()
        self._available = asyncio.Event()
        self._available.set()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        try:
            async with asyncio.timeout(None if timeout == 0 else timeout):
                while True:
                    async with self._lock:
                        if self._free:
                            block = self._free.popleft()
                            if not self._free:
                                self._available.clear()
                            return self._taken(block)
                        if timeout == 0:
                            return None
                    await self._available.wait()
        except TimeoutError:
            return None

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue and set the event."""
        async with self._lock:  # may wait for the lock: nothing has changed yet
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._available.set()
        return True
