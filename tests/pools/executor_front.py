"""An async face over kvstress's threaded pool through the loop's executor: ``acquire`` runs the
threaded acquire in a thread with ``run_in_executor`` and bounds the wait with
``asyncio.wait_for`` with the same timeout; a block the thread gets for a caller that has given
up (timed out first, or cancelled) goes back from the future's done-callback.

Correct. The thread outlives a caller that timed out: it may take a block released a moment
after and give it back from the callback, a turn of the loop later.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kvstress import ThreadedBlockPool
from pools._front import InnerFront


class ExecutorFrontPool(InnerFront):
    """``ThreadedBlockPool`` behind ``run_in_executor`` and ``wait_for``."""

    backoff_bound = 0.0

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        self._inner = ThreadedBlockPool(num_blocks, block_shape, **options)
        self.num_blocks = num_blocks

    def _abandon(self, answer: asyncio.Future[Any]) -> None:
        """The caller gave up: a block the thread still gets goes back."""

        def give_back(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None and done.result() is not None:
                self._inner.release(done.result())

        answer.add_done_callback(give_back)

    async def acquire(self, timeout: float | None = None) -> Any:
        if timeout is not None and timeout <= 0:
            return self._inner.acquire(0)
        answer = asyncio.get_running_loop().run_in_executor(None, self._inner.acquire, timeout)
        try:
            return await asyncio.wait_for(asyncio.shield(answer), timeout)
        except TimeoutError:
            self._abandon(answer)
            return None
        except BaseException:
            self._abandon(answer)
            raise

    async def release(self, block: Any) -> bool:
        return self._inner.release(block)


class ExecutorFrontLeakPool(ExecutorFrontPool):
    """BUG: a block the thread gets for a caller that gave up is dropped (the executor's future
    is cancelled by ``wait_for`` without the shield, and its result never read)."""

    def _abandon(self, answer: asyncio.Future[Any]) -> None:
        pass
