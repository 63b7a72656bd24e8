"""An async pool whose timed-out waiter leaves the queue one turn of the loop after its call
returned, as poolboy's does: the caller's timeout sends a cancel message (``call_soon``) that
the pool handles on its next turn, and a block released in between goes to the stale waiter
entry, then straight back (to the next waiter, or the free list).

Correct: no block is lost, and it is back within a turn. A try-once in that turn finds none
free; the linearizability check called it a lost wake-up (a blind user's rebuild of poolboy).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from kvstress import BlockState
from pools._simple import Block, _FreeList


class LateCancelPool(_FreeList):
    """A free deque and a FIFO queue of waiters, each handed a block by the call that frees one."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        self._waiting: deque[asyncio.Future[Block]] = deque()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        if self._free:
            return self._take()
        if timeout == 0:
            return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Block] = loop.create_future()
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(waiter)  # the pool's answer: never cancelled
        except TimeoutError:
            loop.call_soon(self._cancel_waiting, waiter)
            return None
        except BaseException:
            loop.call_soon(self._cancel_waiting, waiter)
            raise

    def _cancel_waiting(self, waiter: asyncio.Future[Block]) -> None:
        """The cancel message, a turn later: out of the queue, or the block it got goes on."""
        if waiter in self._waiting:
            self._waiting.remove(waiter)
        elif waiter.done():
            self._offer(waiter.result())  # still zeroed: its caller never had it

    def _offer(self, block: Block) -> None:
        """A zeroed block: to the first waiter (still held), or free."""
        if self._waiting:
            block.state, block.refcount = BlockState.ACQUIRED, 1
            self._waiting.popleft().set_result(block)
        else:
            super()._offer(block)

    def _wake(self) -> None:
        pass  # a waiter is handed its block by _offer

    async def release(self, block: Block) -> bool:
        return self._drop(block)


class LateCancelLeakPool(LateCancelPool):
    """BUG: the cancel message forgets the block handed to the stale entry."""

    def _cancel_waiting(self, waiter: asyncio.Future[Block]) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)
