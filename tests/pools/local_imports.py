"""Correct pools whose only oddity is where they import their clock: inside the function that
reads it (``import time``, ``from time import monotonic``), not at the top of the module.

Under control such an import got the real ``time`` module while the pool waited on virtual
time: a deadline computed from it never came, and a correct pool was reported as a hang.
``LocalImportTwinPool`` keeps the local import and loses a wake-up (``if`` for ``while``
around a wait that a barging acquire can beat), so the search still has a bug to find.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._ledger import BlockLedger
from tests.pools._condition import ConditionPool


class LocalImportPool(ConditionPool):
    """A deque and a Condition; the deadline loop reads ``time`` imported inside ``acquire``."""

    def acquire(self, timeout: float | None = None) -> Block | None:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not self._free:
                if deadline is None:
                    self._changed.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)
            return self._taken(self._free.popleft())


class AsyncLocalImportPool(BlockLedger):
    """An asyncio Condition; the deadline reads ``from time import monotonic`` inside ``acquire``."""

    backoff_bound = 0.0
    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._changed: asyncio.Condition | None = None

    async def acquire(self, timeout: float | None = None) -> Block | None:
        from time import monotonic

        self._changed = self._changed or asyncio.Condition()
        deadline = None if timeout is None else monotonic() + timeout
        async with self._changed:
            while not self._free:
                left = None if deadline is None else deadline - monotonic()
                if left is not None and left <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except TimeoutError:
                    return None
            return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        self._changed = self._changed or asyncio.Condition()
        async with self._changed:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._changed.notify()
            return True


class LocalImportTwinPool(LocalImportPool):
    """The same local import, and a waiter that gives up after one wake-up a barging acquire
    made useless (``if`` for ``while``): it answers None before its deadline, with blocks that
    came back later still ahead of it."""

    def acquire(self, timeout: float | None = None) -> Block | None:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            if not self._free:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left)
            if not self._free:
                return None  # BUG: woken, beaten to the block, gives up before its deadline
            return self._taken(self._free.popleft())
