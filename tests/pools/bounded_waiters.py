"""An asyncio pool that hands a freed block straight to the oldest waiter's future, correct and
with its waiter list bounded at three (``deque(maxlen=3)``: "a burst cannot grow it"), which
drops the oldest waiter once a fourth parks: it then waits beside free blocks to its timeout.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from kvstress import BlockState
from tests.pools._simple import Block, _check_timeout, _FreeList


class HandOffPool(_FreeList):
    """Correct: a release hands the block to the oldest waiter still waiting, else queues it; a
    waiter that gives up with a block handed to it passes the block on."""

    MAXLEN: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiters: deque[asyncio.Future[Block]] = deque(maxlen=self.MAXLEN)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        _check_timeout(timeout)
        if self._free:
            return self._take()
        if timeout == 0:
            return None
        waiter: asyncio.Future[Block] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            self._give_up(waiter)
            return None
        except BaseException:
            self._give_up(waiter)
            raise

    def _give_up(self, waiter: asyncio.Future[Block]) -> None:
        if waiter.done() and not waiter.cancelled():
            block = waiter.result()  # handed to it as it gave up: on to the next
            block.refcount = 0
            self._offer(block)
            return
        waiter.cancel()
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    async def release(self, block: Block) -> bool:
        return self._drop(block)

    def _offer(self, block: Block) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                block.state, block.refcount = BlockState.ACQUIRED, 1
                waiter.set_result(block)
                return
        super()._offer(block)

    def _wake(self) -> None:
        pass  # _offer hands the block over itself


class BoundedWaitersPool(HandOffPool):
    """The twin: at most three waiters are kept; a fourth pushes the oldest out, unwoken."""

    MAXLEN = 3
