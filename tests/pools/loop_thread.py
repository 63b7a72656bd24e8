"""Threaded pools whose allocator is an asyncio event loop in a thread of the pool's own: the
"sync facade over an async core" (as ``anyio.from_thread`` portals and many database drivers
are built). Callers submit coroutines with ``asyncio.run_coroutine_threadsafe(...).result()``.

``LoopThreadPool`` is correct: every change happens on the loop, a waiter is a loop future with a
``call_later`` timeout, and a release hands its block to the first waiter not done. Under the
baton its loop used to wait in the stock selector and its callers on a real
``concurrent.futures.Future``: a correct pool was reported as a hang.
``AsyncioRunThreadPool`` is the same, its loop made by ``asyncio.run`` in the thread.
``LoopThreadDroppedResultPool`` (BUG) enforces the timeout on the caller's side,
``future.result(timeout)`` then ``future.cancel()``: when the loop took a block for the request
just before, the cancelled future drops the result and the block is lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger

T = TypeVar("T")


class LoopThreadPool(BlockLedger):
    """All state on an event loop run by the pool's own thread; callers wait on its futures."""

    threaded = False  # one loop changes the state: the ledger needs no lock
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiters: list[asyncio.Future[Block | None]] = []
        self._loop = self._start_loop()

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="pool-loop", daemon=True).start()
        return loop

    def _on_loop(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def _acquire(self, timeout: float | None) -> Block | None:
        if self._free:
            return self._taken(self._free.popleft())
        if timeout == 0:
            return None
        waiter: asyncio.Future[Block | None] = self._loop.create_future()
        self._waiters.append(waiter)
        timer = None
        if timeout is not None:
            timer = self._loop.call_later(timeout, lambda: waiter.done() or waiter.set_result(None))
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()

    async def _release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():  # done: it timed out already
                waiter.set_result(self._taken(self._free.popleft()))
                break
        return True

    async def _call(self, method: Any, *args: Any) -> Any:
        return method(*args)

    def acquire(self, timeout: float | None = None) -> Block | None:
        return self._on_loop(self._acquire(seconds(timeout)))

    def release(self, block: Block) -> bool:
        return self._on_loop(self._release(block))

    def mark_in_use(self, block: Block) -> None:
        self._on_loop(self._call(super().mark_in_use, block))

    def retain(self, block: Block) -> None:
        self._on_loop(self._call(super().retain, block))

    def free_count(self) -> int:
        return self._on_loop(self._call(super().free_count))

    def free_ids(self) -> list[int]:
        return self._on_loop(self._call(super().free_ids))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


class AsyncioRunThreadPool(LoopThreadPool):
    """The same, its loop made and run by ``asyncio.run`` in the pool's thread: correct."""

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        ready: concurrent.futures.Future[asyncio.AbstractEventLoop] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None

        async def serve() -> None:
            self._stop = asyncio.Event()
            ready.set_result(asyncio.get_running_loop())
            await self._stop.wait()

        threading.Thread(target=asyncio.run, args=(serve(),), name="pool-loop", daemon=True).start()
        return ready.result()

    def close(self) -> None:
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)


class LoopThreadDroppedResultPool(LoopThreadPool):
    """BUG: a waiting acquire times out on the caller's side and cancels the future; a block the
    loop gave the request just before is dropped with the cancelled future's result."""

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        if timeout == 0:
            return self._on_loop(self._acquire(0))
        future = asyncio.run_coroutine_threadsafe(self._acquire(None), self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            return None
