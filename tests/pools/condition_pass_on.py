"""anyio's ``Condition.wait`` before PR #1075: a waiter notified and then cancelled before it
ran (its deadline struck first) re-raised without passing the notification on, and another
waiter slept beside the block the notify was for. Built here as that ``wait`` was, on an
``anyio.Event`` per waiter, so it runs on asyncio and trio alike."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import anyio
import anyio.lowlevel

from tests.pools._simple import Block, _FreeList


class NotifyPassOnPool(_FreeList):
    """Waiters park on an Event each, first come first woken; a release wakes the first. A
    waiter whose deadline strikes after its Event was set passes the wake-up on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parked: deque[anyio.Event] = deque()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        await anyio.lowlevel.checkpoint()
        while not self._free:
            if anyio.current_time() >= deadline:
                return None
            event = anyio.Event()
            self._parked.append(event)
            woken = False
            try:
                with anyio.move_on_at(deadline):
                    await event.wait()
                    woken = True
            finally:
                if not woken:
                    self._left(event)
            if not woken:
                return None  # the deadline struck (or the caller was cancelled: raised above)
        return self._take()

    def _left(self, event: anyio.Event) -> None:
        if not event.is_set():
            self._parked.remove(event)
        elif self._parked:
            self._parked.popleft().set()  # woken but leaving: the wake-up goes on

    def _wake(self) -> None:
        if self._parked:
            self._parked.popleft().set()

    async def release(self, block: Block) -> bool:
        await anyio.lowlevel.checkpoint()
        return self._drop(block)


class NotifySwallowedPool(NotifyPassOnPool):
    """BUG (anyio before PR #1075): a waiter woken and then cancelled drops the wake-up."""

    def _left(self, event: anyio.Event) -> None:
        if not event.is_set():
            self._parked.remove(event)
