"""An asyncio pool whose acquire ignores its timeout (BUG): a waiting acquire never gives up."""

from __future__ import annotations

import asyncio
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._ledger import BlockLedger
from pools._simple import SimpleThreadedPool


class IgnoresTimeoutPool(BlockLedger):
    """Free blocks in a deque under an ``asyncio.Condition``; ``acquire`` waits for one for ever
    whatever its timeout, except a try-once."""

    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond: asyncio.Condition | None = None

    async def acquire(self, timeout: float | None = None) -> Block | None:
        if timeout == 0:
            return self._taken(self._free.popleft()) if self._free else None
        self._cond = self._cond or asyncio.Condition()
        async with self._cond:
            await self._cond.wait_for(lambda: self._free)  # the timeout is ignored
            return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        if self._cond is not None:
            async with self._cond:
                self._cond.notify()
        return True


class ThreadedIgnoresTimeoutPool(SimpleThreadedPool):
    """A threaded pool whose acquire waits for a block for ever, whatever its timeout, except a
    try-once (BUG)."""

    def acquire(self, timeout: float | None = None) -> Block | None:  # type: ignore[override]
        return super().acquire(timeout if timeout == 0 else None)
