"""An asyncio pool whose background task reorders its free list every 2 ms, the sort handed to
an executor's thread so that it never blocks the loop: work is out in a real thread nearly all
the time.

The twin installs the sorted copy of a snapshot taken before the await, dropping the blocks
released meanwhile (a blind user's). The harness's quiet check waited for the dropped blocks,
its wait's time excused while work was out in threads, until the run's time limit: a ``hang``
"something keeps waiting or polling", where the pool had lost a block.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from pools._simple import Block, _FreeList


class ExecutorCompactorPool(_FreeList):
    """A Condition pool; its compactor sorts under the Condition, after a checksum of the ids
    computed in an executor's thread (work out in a thread, changing nothing)."""

    PERIOD = 0.002

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        self._cond = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def _compactor(self) -> None:
        while True:
            await asyncio.sleep(self.PERIOD)
            await self._compact()

    async def _compact(self) -> None:
        ids = [block.id for block in self._free]
        await asyncio.get_running_loop().run_in_executor(None, sum, ids)
        async with self._cond:
            self._free = deque(sorted(self._free, key=lambda block: block.id))

    async def acquire(self, timeout: float | None = None) -> Block | None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._compactor())
        async with self._cond:
            try:
                async with asyncio.timeout(timeout):
                    await self._cond.wait_for(lambda: self._free)
            except TimeoutError:
                return None
            except BaseException:
                if self._free:
                    self._cond.notify()  # a wake-up it may have taken goes on
                raise
            return self._take()

    async def release(self, block: Block) -> bool:
        async with self._cond:
            return self._drop(block)

    def _wake(self) -> None:
        self._cond.notify()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class ExecutorCompactorStalePool(ExecutorCompactorPool):
    """BUG: the sorted copy of a snapshot taken before the executor's await is installed."""

    async def _compact(self) -> None:
        snapshot = list(self._free)
        ordered = await asyncio.get_running_loop().run_in_executor(
            None, lambda: sorted(snapshot, key=lambda block: block.id)
        )
        async with self._cond:
            self._free = deque(ordered)
            self._count = len(ordered)
