"""An asyncio pool that hands a released block straight to the oldest waiter, in a module that
also imports anyio (for its demo, not for the pool): callers cancel it as asyncio code does.

``HandoffPool`` skips a waiter whose task is already being cancelled, and a waiter cancelled
after the hand-off, before it ran, passes its block on. ``HandoffDropsPool`` does not: the
block handed to it is lost (the flaw of anyio's memory streams under a native cancel, written
on asyncio alone).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio

from kvstress import BlockState
from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger
from pools._busy import busy_for
from pools._worker import reset_worker


class _Waiter:
    __slots__ = ("block", "event", "task")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.block: Block | None = None
        self.task = asyncio.current_task()


class HandoffPool(BlockLedger):
    """Free blocks in a deque; a waiter parks on an Event of its own and is handed its block."""

    backoff_bound = 0.0
    backends = ("asyncio",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiters: deque[_Waiter] = deque()

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        if self._free:
            return self._taken(self._free.popleft())
        if timeout == 0:
            return None
        waiter = _Waiter()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter.event.wait()
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            self._cancelled_after(waiter)
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return waiter.block

    def _cancelled_after(self, waiter: _Waiter) -> None:
        """A block handed to a waiter cancelled before it ran goes to the next one."""
        if waiter.block is not None:
            block, waiter.block = waiter.block, None
            block.state, block.refcount = BlockState.FREE, 0
            self._offer(block)

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._offer(block)
        return True

    def _offer(self, block: Block) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.task is not None and not waiter.task.cancelling():
                waiter.block = self._taken(block)
                waiter.event.set()
                return
        self._free.append(block)


class HandoffDropsPool(HandoffPool):
    """A waiter cancelled after its hand-off drops the block (BUG)."""

    def _cancelled_after(self, waiter: _Waiter) -> None:
        return None


class ExecutorResetHandoffPool(HandoffPool):
    """Correct: a released block is zeroed on a ``ThreadPoolExecutor`` of the pool's own, whose
    worker offers it back on the loop with ``call_soon_threadsafe`` (a blind sweep's design: the
    controlled loop used to move time past a quiet check while the worker zeroed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._executor = ThreadPoolExecutor(max_workers=1)

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._executor.submit(self._in_worker, asyncio.get_running_loop(), block)
        return True

    def _in_worker(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        self._reset(block)
        loop.call_soon_threadsafe(self._back, block)

    def _back(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._offer(block)


class ExecutorSkipsResetPool(ExecutorResetHandoffPool):
    """The worker offers the block back without zeroing it (BUG): the next holder reads stale K/V."""

    def _in_worker(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        loop.call_soon_threadsafe(self._back, block)


class ThreadResetHandoffPool(HandoffPool):
    """Correct: a released block is zeroed by a reset thread of the pool's own, fed by a
    ``queue.Queue``, which offers it back on the loop with ``call_soon_threadsafe`` (or, with
    ``via_coroutine``, ``run_coroutine_threadsafe``). The loop cannot see the thread's work in
    hand: it moved virtual time past a quiet check while the thread zeroed, and the block was
    reported lost. The thread holds the pool weakly and ends with it."""

    via_coroutine = False
    wake_at_exit = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._jobs: queue.Queue[tuple[asyncio.AbstractEventLoop, Block] | None] = queue.Queue()
        work = (weakref.ref(self), self._jobs, "_zeroed", RuntimeError)  # RuntimeError: the loop closed
        worker = threading.Thread(target=reset_worker, args=work, daemon=True)
        worker.start()
        # Not at exit: a daemon thread woken while the interpreter shuts down may abort it.
        weakref.finalize(self, self._jobs.put, None).atexit = self.wake_at_exit

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._jobs.put((asyncio.get_running_loop(), block))
        return True

    def _zeroed(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        """In the reset thread: zero the block and hand it back to the loop."""
        self._reset(block)
        if self.via_coroutine:
            back = self._back_soon(block)
            try:
                asyncio.run_coroutine_threadsafe(back, loop)
            except RuntimeError:
                back.close()  # the loop closed: never to be awaited
                raise
        else:
            loop.call_soon_threadsafe(self._back, block)

    async def _back_soon(self, block: Block) -> None:
        self._back(block)

    def _back(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._offer(block)


class ThreadSleepsResetHandoffPool(ThreadResetHandoffPool):
    """Correct, as ``ThreadResetHandoffPool``, its reset thread sleeping 1 ms of real time before
    it zeroes (to batch, say): asleep in the kernel with the block in hand, it read as parked,
    and the idle loop moved virtual time to a waiter's timeout without it (a blind user's)."""

    def _zeroed(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        time.sleep(0.001)
        super()._zeroed(loop, block)


class ThreadSlowResetHandoffPool(ThreadResetHandoffPool):
    """Correct, as ``ThreadResetHandoffPool``, its reset thread working 0.15 s of real time on
    each block before it zeroes it: longer than the checks' settle time (a large block zeroed
    on the CPU, or a thread starved of a core)."""

    def _zeroed(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        busy_for(0.15)
        super()._zeroed(loop, block)


class ThreadSleepsLosesBlockPool(ThreadSleepsResetHandoffPool):
    """As ``ThreadSleepsResetHandoffPool``, but the thread never offers a block it slept over
    (BUG): the wait for an offer on its way is bounded, and the block is found lost."""

    def _zeroed(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        time.sleep(0.001)


class ThreadCoroutineResetHandoffPool(ThreadResetHandoffPool):
    """Correct, as ``ThreadResetHandoffPool``, handing back with ``run_coroutine_threadsafe``."""

    via_coroutine = True


class ExitWakesResetThreadPool(ThreadResetHandoffPool):
    """Correct, as ``ThreadResetHandoffPool``, but its reset thread is told to stop by an exit
    hook (``weakref.finalize``'s default): woken as the interpreter shuts down, it may abort the
    process (``terminate called without an active exception``) after all its work is done."""

    wake_at_exit = True


class ThreadSkipsResetPool(ThreadResetHandoffPool):
    """The reset thread offers the block back without zeroing it (BUG): stale K/V."""

    def _zeroed(self, loop: asyncio.AbstractEventLoop, block: Block) -> None:
        loop.call_soon_threadsafe(self._back, block)


def demo() -> None:  # pragma: no cover - what the module imports anyio for
    async def main() -> None:
        pool = HandoffPool(2, 4)
        block = await pool.acquire(0)
        assert block is not None
        await pool.release(block)

    anyio.run(main)
