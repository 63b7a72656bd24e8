"""An async pool that serves each acquire in a task of its own: the task waits in an inner pool
(with the caller's timeout) and answers the caller's future on the next turn of the loop; a
block taken for a caller that is gone (cancelled, timed out) goes back then.

Correct. The serving task outlives a cancelled caller: it may take a block released after the
caller returned, and hand it back a turn later. A try-once in between finds no block free, and
the linearizability check called that a lost block (in CI, the same design on worker threads).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kvstress import AsyncBlockPool
from pools._front import InnerFront


class TaskPerRequestPool(InnerFront):
    """``AsyncBlockPool`` behind one serving task per acquire."""

    backoff_bound = 0.0

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        self._inner = AsyncBlockPool(num_blocks, block_shape, **options)
        self.num_blocks = num_blocks
        self._serving: set[asyncio.Task[None]] = set()

    async def _serve(self, answer: asyncio.Future[Any], timeout: float | None) -> None:
        block = await self._inner.acquire(timeout)
        await asyncio.sleep(0)  # the answer goes out on the next turn of the loop
        if not answer.done():
            answer.set_result(block)
        elif block is not None:  # the caller is gone: the block goes back
            await self._inner.release(block)

    async def acquire(self, timeout: float | None = None) -> Any:
        if timeout is not None and timeout <= 0:
            return await self._inner.acquire(0)
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        task = loop.create_task(self._serve(answer, timeout))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        try:
            return await answer
        except BaseException:
            if answer.done() and not answer.cancelled() and answer.result() is not None:
                await asyncio.shield(self._inner.release(answer.result()))
            raise

    async def release(self, block: Any) -> bool:
        return await self._inner.release(block)


class TaskPerRequestLeakPool(TaskPerRequestPool):
    """BUG: a block taken for a caller that is gone is forgotten, not given back."""

    async def _serve(self, answer: asyncio.Future[Any], timeout: float | None) -> None:
        block = await self._inner.acquire(timeout)
        await asyncio.sleep(0)
        if not answer.done():
            answer.set_result(block)
