"""anyio pools whose waiting is done in a worker thread (``anyio.to_thread.run_sync``,
``abandon_on_cancel=True``), run on trio: the thread keeps the caller's timeout, or the caller
keeps it with ``anyio.fail_after`` around a thread that waits until told the caller is gone.

Correct. On trio the run's clock stood still while the thread worked: a thread that waited out
a 0.2 s timeout answered after 0 s of virtual time (``timeout-early``), and a ``fail_after``
around the thread's wait never fired (``hang``: blind users' pools, clean on asyncio). And a
deadline the task computed with ``time.monotonic()`` for the thread to wait until: the trio
run's worker threads read the real clock, so the deadline (virtual) was long past
(``timeout-early`` on every seed; clean on asyncio, whose threads read the loop's clock).
"""

from __future__ import annotations

import time

import anyio
import anyio.to_thread

from pools._simple import Block
from pools.deadline_thread import DeadlineExecutorPool, Request


class AnyioThreadWaitPool(DeadlineExecutorPool):
    """The thread waits on the pool's Condition for at most the caller's timeout."""

    def _wait_for(self, request: Request, timeout: float | None) -> Block | None:  # the thread
        with self._cond:
            self._cond.wait_for(lambda: self._free or request["dead"], timeout)
            if request["dead"] or not self._free:
                if self._free:
                    self._cond.notify()  # the wake-up it may have taken goes on
                return None
            block = request["block"] = self._take()
            return block

    async def _wait_for_block(self, timeout: float | None) -> Block | None:
        request: Request = {"dead": False, "block": None}
        try:
            return await self._wait(request, timeout)
        except BaseException:
            self._caller_gone(request)
            raise

    async def _wait(self, request: Request, timeout: float | None) -> Block | None:  # type: ignore[override]
        return await anyio.to_thread.run_sync(self._wait_for, request, timeout, abandon_on_cancel=True)


class AnyioDeadlinePool(AnyioThreadWaitPool):
    """The task computes the deadline with ``time.monotonic()``; the thread waits until it."""

    async def _wait(self, request: Request, timeout: float | None) -> Block | None:  # type: ignore[override]
        deadline = None if timeout is None else time.monotonic() + timeout
        return await anyio.to_thread.run_sync(self._wait_until, deadline, request, abandon_on_cancel=True)


class AnyioFailAfterPool(AnyioThreadWaitPool):
    """The caller keeps the timeout: ``fail_after`` around a thread that waits until told."""

    async def _wait(self, request: Request, timeout: float | None) -> Block | None:  # type: ignore[override]
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(self._wait_for, request, None, abandon_on_cancel=True)
        except TimeoutError:
            self._caller_gone(request)
            return None


class AnyioThreadKeepsPool(AnyioThreadWaitPool):
    """BUG: the thread waits on for a caller that is gone, and keeps the block it then takes."""

    def _wait_for(self, request: Request, timeout: float | None) -> Block | None:  # the thread
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                return None
            block = request["block"] = self._take()
            return block

    def _caller_gone(self, request: Request) -> None:
        with self._cond:
            request["dead"] = True
