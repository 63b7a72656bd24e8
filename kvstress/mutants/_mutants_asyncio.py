"""Mutants of the asyncio-only ordinary pools, in a module that imports neither anyio nor
trio: the harness cancels a pool written on asyncio alone as asyncio code is, with one
``Task.cancel()`` (``speaks_anyio`` looks at the modules of the pool's class), and the bugs here
live in what that cancellation does.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from kvstress.mutants._block import Block
from kvstress.mutants._ordinary_asyncio import AsyncioConditionPool


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
