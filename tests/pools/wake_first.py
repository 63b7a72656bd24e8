"""An asyncio pool whose waiters park on futures, one wake-up per block given back, in the manner
of ``asyncio.Lock`` before and after CPython bpo-32734 (PR #5466).

A woken waiter takes the head of the free deque on trust: the wake-up was its block. A waiter
that gives up (its deadline, a cancellation) while blocks are free passes a wake-up on, since
one may have been meant for it.

``WakeFirstPool`` is correct: a wake-up goes to the first waiter in line, and to nobody if that
one is woken already (it takes the block, or, leaving, passes it on itself).
``WakeFirstNotDonePool`` (BUG, bpo-32734) wakes the first waiter not yet woken. With three
parked, the first's deadline lands as a block comes back: the release skips the leaving waiter
and wakes the second; the leaving one, seeing the block still free (the second has not run),
wakes the third too. Two woken for one block: the second takes it, the third pops an empty deque.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class WakeFirstPool(BlockLedger):
    """Waiters in line on futures; a wake-up per block back."""

    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        if self._free and not any(not waiter.cancelled() for waiter in self._waiters):
            return self._taken(self._free.popleft())
        if timeout == 0:
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            try:
                async with asyncio.timeout(timeout):
                    await waiter
            finally:
                self._waiters.remove(waiter)
        except (TimeoutError, asyncio.CancelledError) as leaving:
            if self._free:
                self._wake_next()
            if isinstance(leaving, asyncio.CancelledError):
                raise
            return None
        block = self._taken(self._free.popleft())
        if self._free:
            self._wake_next()
        return block

    def _wake_next(self) -> None:
        if self._waiters and not self._waiters[0].done():
            self._waiters[0].set_result(None)

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._wake_next()
        return True


class WakeFirstNotDonePool(WakeFirstPool):
    """BUG (bpo-32734): the first waiter not yet woken gets the wake-up, past one woken already."""

    def _wake_next(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return
