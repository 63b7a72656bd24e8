"""An asyncio pool whose releases go through a task of its own, which dies on its second job:
the blocks it had are lost, and the finding names the task's death."""

from __future__ import annotations

import asyncio
from typing import Any

from kvstress import BlockState
from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class DyingOfferTaskPool(BlockLedger):
    """Buggy: the offering task raises on its second job, and nobody awaits it."""

    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond: asyncio.Condition | None = None
        self._jobs: asyncio.Queue[Block] | None = None
        self._task: asyncio.Task[None] | None = None

    def _started(self) -> tuple[asyncio.Condition, asyncio.Queue[Block]]:
        if self._cond is None or self._jobs is None:
            self._cond, self._jobs = asyncio.Condition(), asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._offers())
        return self._cond, self._jobs

    async def acquire(self, timeout: float | None = None) -> Block | None:
        cond, _ = self._started()
        async with cond:
            if not self._free and timeout == 0:
                return None
            if self._free:
                return self._taken(self._free.popleft())
            try:
                await asyncio.wait_for(cond.wait_for(lambda: bool(self._free)), seconds(timeout))
            except TimeoutError:
                return None
            return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        _, jobs = self._started()
        if self._last_reference(block):
            jobs.put_nowait(block)
        return True

    async def _offers(self) -> None:
        cond, jobs = self._started()
        done = 0
        while True:
            block = await jobs.get()
            done += 1
            if done == 2:
                raise RuntimeError("the offering task's second job")
            self._reset(block)
            block.state = BlockState.FREE
            async with cond:
                self._free.append(block)
                cond.notify()
