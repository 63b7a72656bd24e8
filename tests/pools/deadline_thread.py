"""Async pools whose caller computes a deadline with ``time.monotonic()`` on the loop's thread and
hand it to a thread that waits until it: an executor's thread, per call, and an allocator
thread of the pool's own, parked in a timed wait between requests.

Correct: in a real process every thread reads one clock. Under the controlled loop the pool's
module read virtual time on the loop's thread and real time in the others, so a worker saw a
deadline long past and answered None at once (``timeout-early``, a blind user's); and a parked
allocator, once it read the loop's clock, saw it stand still and never reach the deadline (the
loop then called the wait a deadlock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from typing import Any

from kvstress import BlockState
from pools._simple import Block, _FreeList

Request = dict[str, Any]


class DeadlineExecutorPool(_FreeList):
    """A free deque under one Condition; a caller that must wait waits in an executor's thread,
    until the deadline the caller computed."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        self._cond = threading.Condition()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=8)

    def _exclusive(self) -> contextlib.AbstractContextManager[object]:
        return self._cond

    def _wake(self) -> None:
        self._cond.notify_all()

    def _wait_until(self, deadline: float | None, request: Request) -> Block | None:  # a worker thread
        with self._cond:
            while not self._free and not request["dead"]:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if request["dead"]:
                self._cond.notify()  # the wake-up it may have taken goes on
                return None
            block = request["block"] = self._take()
            return block

    async def acquire(self, timeout: float | None = None) -> Block | None:
        with self._cond:
            if self._free:
                return self._take()
        if timeout == 0:
            return None
        return await self._wait_for_block(timeout)

    async def _wait_for_block(self, timeout: float | None) -> Block | None:
        return await self._wait(None if timeout is None else time.monotonic() + timeout)

    async def _wait(self, deadline: float | None) -> Block | None:
        request: Request = {"dead": False, "block": None}
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._wait_until, deadline, request)
        except BaseException:
            self._caller_gone(request)
            raise

    def _caller_gone(self, request: Request) -> None:
        """The caller gave up: its thread is told, and a block taken for it goes back."""
        with self._cond:
            request["dead"] = True
            block = request["block"]
            self._cond.notify_all()
            if block is not None:
                self._give_back(block)

    def _give_back(self, block: Block) -> None:  # with the Condition held; zeroed, never used
        block.state = BlockState.RELEASING
        self._offer(block)

    async def release(self, block: Block) -> bool:
        with self._cond:
            return self._drop(block)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class DeadlineAllocatorPool(DeadlineExecutorPool):
    """The same, a caller that must wait queueing a request for an allocator thread, which
    answers through the loop when a block is free or the request's deadline has passed."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        self._requests: deque[Request] = deque()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="allocator", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for request in list(self._requests):
                    if request["dead"]:
                        self._requests.remove(request)
                    elif self._free:
                        self._requests.remove(request)
                        self._answer(request, self._take())
                    elif request["deadline"] is not None and now >= request["deadline"]:
                        self._requests.remove(request)
                        self._answer(request, None)
                deadlines = [r["deadline"] for r in self._requests if r["deadline"] is not None]
                self._cond.wait(max(0.0, min(deadlines) - now) if deadlines else None)

    def _answer(self, request: Request, block: Block | None) -> None:
        request["loop"].call_soon_threadsafe(self._deliver, request, block)

    def _deliver(self, request: Request, block: Block | None) -> None:  # on the loop
        if not request["future"].done():
            request["future"].set_result(block)
        elif block is not None:
            with self._cond:
                self._give_back(block)  # the caller is gone

    async def _wait(self, deadline: float | None) -> Block | None:
        loop = asyncio.get_running_loop()
        request: Request = {"dead": False, "deadline": deadline, "loop": loop, "future": loop.create_future()}
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()
        try:
            return await request["future"]  # type: ignore[no-any-return]
        except BaseException:
            with self._cond:
                request["dead"] = True
                self._cond.notify_all()
            raise

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        super().close()


class DeadlineExecutorEarlyPool(DeadlineExecutorPool):
    """BUG: the deadline handed to the thread is half the timeout away."""

    async def _wait_for_block(self, timeout: float | None) -> Block | None:
        return await self._wait(None if timeout is None else time.monotonic() + timeout / 2)
