"""Mutants of the asyncio-only ordinary pools, each a slip a developer makes with asyncio's own
primitives: the harness cancels a pool written on asyncio alone as asyncio code is, with one
``Task.cancel()`` (``speaks_anyio`` looks at the code of the pool's class), and several of the
bugs here live in what that does.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ordinary_asyncio import (
    AsyncioConditionPool,
    AsyncioLockEventPool,
    AsyncioQueuePool,
    AsyncioSemaphorePool,
)


class _DropsNotifyCondition:
    """``asyncio.Condition``'s wait and notify as CPython wrote them before 3.13 (gh-112202): a
    waiter whose notify came and that is then cancelled before it runs again (its timeout
    landing just then) re-takes the lock and raises, and the notify it took is gone. Written
    out here, on an ``asyncio.Lock`` and futures, so the mutant is the same on every Python."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()

    async def __aenter__(self) -> None:
        await self._lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()

    async def wait_for(self, predicate: Callable[[], bool]) -> bool:
        while not predicate():
            self._lock.release()
            try:
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                finally:
                    self._waiters.remove(waiter)
            finally:
                cancelled = False
                while True:  # the lock is taken again even when cancelled
                    try:
                        await self._lock.acquire()
                        break
                    except asyncio.CancelledError:
                        cancelled = True
                if cancelled:
                    raise asyncio.CancelledError  # BUG: a notify this waiter took is dropped
        return True

    def notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(True)
                return


class AsyncioConditionDropsNotifyPool(AsyncioConditionPool):
    """The Condition pool trusting its Condition to pass a notify on: with a Condition as
    asyncio's was before Python 3.13 (gh-112202), one waiter notified and then cancelled drops
    the release's notify, and another waiter sleeps beside the free block until its timeout."""

    expected = ("lost-wakeup",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = _DropsNotifyCondition()  # type: ignore[assignment]

    async def _acquire(self, timeout: float | None) -> Block | None:
        async with self._cond:
            if not self._free:
                if timeout == 0:
                    return None
                async with asyncio.timeout(timeout):
                    await self._cond.wait_for(lambda: bool(self._free))  # no pass-on when cancelled
            return self._taken(self._free.popleft())


class AsyncioSemaphoreTakeThenYieldPool(AsyncioSemaphorePool):
    """After its unit, acquire awaits (a metrics hook) before it takes the block: a task
    cancelled there keeps the unit, and the pool has one unit fewer than free blocks for good."""

    expected = ("lost-block", "lost-wakeup")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        try:
            async with asyncio.timeout(None if timeout == 0 else timeout):
                if timeout == 0 and self._units.locked():
                    return None
                await self._units.acquire()
                await asyncio.sleep(0)  # BUG: a cancellation here strands the unit
        except TimeoutError:
            return None
        return self._taken(self._free.popleft())


class AsyncioSemaphoreUnusedReleasePool(AsyncioSemaphorePool):
    """The unit goes back only for a block that was put in use: a block released unused (an
    aborted request) is queued, but its unit is lost."""

    expected = ("lost-block", "lost-wakeup")

    async def release(self, block: Block) -> bool:
        was_used = block.state.name == "IN_USE"
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        if was_used:  # BUG: the error path (released unused) skips the unit
            self._units.release()
        return True


class AsyncioQueueAwaitAfterGetPool(AsyncioQueuePool):
    """After ``get()`` returns the block, acquire awaits (to log the wait) before it records the
    block: a cancellation there drops a block that left the queue."""

    expected = ("lost-block", "lost-wakeup", "counter-mismatch")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        try:
            if timeout == 0:
                block = self._queue.get_nowait()
            else:
                async with asyncio.timeout(timeout):
                    block = await self._queue.get()
                    await asyncio.sleep(0)  # BUG: the block is in hand, and nobody owns it
        except (asyncio.QueueEmpty, TimeoutError):
            return None
        self._free.remove(block)
        return self._taken(block)


class AsyncioConditionIfNotWhilePool(AsyncioConditionPool):
    """An ``if`` where the ``while`` belongs: a notified waiter must take the lock again, and a
    newcomer that gets it first takes the block; the waiter then pops an empty deque."""

    expected = ("crash", "lost-block", "lost-wakeup")

    async def _acquire(self, timeout: float | None) -> Block | None:
        async with self._cond:
            if not self._free:
                if timeout == 0:
                    return None
                try:
                    async with asyncio.timeout(timeout):
                        await self._cond.wait()  # BUG: woken is not the same as a block left
                except (TimeoutError, asyncio.CancelledError):
                    if self._free:
                        self._cond.notify()
                    raise
            return self._taken(self._free.popleft())


class AsyncioLockEventRearmedTimeoutPool(AsyncioLockEventPool):
    """Each round of the wait gets the whole timeout again (``wait_for(event.wait(), timeout)``
    in the loop): a waiter that is woken and loses the block to another waits past its
    deadline."""

    expected = ("timeout-late",)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        while True:
            async with self._lock:
                if self._free:
                    block = self._free.popleft()
                    if not self._free:
                        self._available.clear()
                    return self._taken(block)
                if timeout == 0:
                    return None
            try:
                await asyncio.wait_for(self._available.wait(), timeout)  # BUG: re-armed each round
            except TimeoutError:
                return None
