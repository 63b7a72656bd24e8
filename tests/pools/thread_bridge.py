"""An async face over a threaded pool, through worker threads of the pool's own: an acquire is
queued to a worker, which waits in the threaded pool (its timeout on the real clock) and answers
on the loop with ``call_soon_threadsafe``; a block answered to a cancelled acquirer goes back.

Correct. Under the controlled loop the worker's timed wait passes in real time while virtual
time stands still: every timed-out acquire was judged early (``timeout-early`` on every seed, a
blind user's design).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from kvstress import ThreadedBlockPool
from pools._front import InnerFront


class ThreadBridgePool(InnerFront):
    """``ThreadedBlockPool`` behind worker threads, answered on the caller's loop."""

    backoff_bound = 0.0
    WORKERS = 4

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        self._inner = ThreadedBlockPool(num_blocks, block_shape, **options)
        self.num_blocks = num_blocks
        self._jobs: queue.SimpleQueue[tuple[Any, Any, float | None] | None] = queue.SimpleQueue()
        for _ in range(self.WORKERS):
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, answer, timeout = job
            block = self._inner.acquire(timeout)
            try:
                loop.call_soon_threadsafe(self._deliver, answer, block)
            except RuntimeError:  # the run's loop closed meanwhile
                if block is not None:
                    self._inner.release(block)

    def _deliver(self, answer: asyncio.Future[Any], block: Any) -> None:
        if answer.done():  # the acquirer was cancelled: the block goes back
            if block is not None:
                self._inner.release(block)
        else:
            answer.set_result(block)

    async def acquire(self, timeout: float | None = None) -> Any:
        if timeout is not None and timeout <= 0:
            return self._inner.acquire(0)
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._jobs.put((loop, answer, timeout))
        try:
            return await answer
        except BaseException:
            if answer.done() and not answer.cancelled() and answer.result() is not None:
                self._inner.release(answer.result())
            raise

    async def release(self, block: Any) -> bool:
        return self._inner.release(block)

    def close(self) -> None:
        for _ in range(self.WORKERS):
            self._jobs.put(None)


class ThreadBridgeHalfTimeoutPool(ThreadBridgePool):
    """BUG: the worker waits half the timeout ("the other half is for the hop back"), and the
    acquire gives up early."""

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, answer, timeout = job
            block = self._inner.acquire(None if timeout is None else timeout / 2)
            try:
                loop.call_soon_threadsafe(self._deliver, answer, block)
            except RuntimeError:
                if block is not None:
                    self._inner.release(block)
