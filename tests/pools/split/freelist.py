"""Reusable blocking free lists: a threaded one on a Condition, an async one on futures, each
bounding its waits with ``deadline.Deadline``."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any

from pools.split.deadline import Deadline


class FreeList:
    """A FIFO of free items; ``get`` waits for one, at most ``timeout`` seconds."""

    def __init__(self, items: Any = ()) -> None:
        self._items: deque[Any] = deque(items)
        self._cv = threading.Condition()

    def get(self, timeout: float | None = None) -> Any:
        deadline = Deadline(timeout)
        with self._cv:
            while not self._items:
                if deadline.expired():
                    return None
                self._cv.wait(deadline.remaining())
            return self._items.popleft()

    def put(self, item: Any) -> None:
        with self._cv:
            self._items.append(item)
            self._cv.notify()

    def snapshot(self) -> list[Any]:
        with self._cv:
            return list(self._items)


class AsyncFreeList:
    """The same on asyncio: each waiter parks on a future of its own, woken in FIFO order."""

    def __init__(self, items: Any = ()) -> None:
        self._items: deque[Any] = deque(items)
        self._waiters: deque[asyncio.Future[None]] = deque()

    def get_nowait(self) -> Any:
        return self._items.popleft() if self._items else None

    async def get(self, timeout: float | None = None) -> Any:
        deadline = Deadline(timeout)
        while not self._items:
            if deadline.expired():
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(deadline.remaining()):
                    await waiter
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on the wake-up this waiter was given
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return self._items.popleft()

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def snapshot(self) -> list[Any]:
        return list(self._items)


class CountedFreeList(FreeList):
    """A FreeList that keeps ``count`` beside its queue. BUG: ``put`` counts after it has let the
    lock go, so two puts at once (or a put racing a get) lose an update."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__(items)
        self.count = len(self._items)

    def get(self, timeout: float | None = None) -> Any:
        with self._cv:
            item = super().get(timeout)
            if item is not None:
                self.count -= 1
            return item

    def put(self, item: Any) -> None:
        super().put(item)
        self.count += 1  # BUG: outside the lock
