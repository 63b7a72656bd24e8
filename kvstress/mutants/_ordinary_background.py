"""Correct pools written the ordinary way that poll, or that own a background worker.

An async pool that polls with capped exponential backoff, and two pools with housekeeping (as
HikariCP has): a daemon thread, and an asyncio task, that wake every 30 s to note blocks held
too long. Their timed waits are the pool's own business, never a hang of the caller's.

And three pools whose release hands the reset to a worker (a thread, a task, a
``ThreadPoolExecutor``), as a GPU pool hands it to a stream: ``release`` returns True with the
block still RELEASING, and the worker zeroes it and offers it a moment later. Nothing in the
protocol asks a pool to be back at rest when ``release`` returns; only that the block is zeroed
before it is offered, and offered soon.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._ledger import BlockLedger
from kvstress.mutants._ordinary_asyncio import AsyncioConditionPool
from kvstress.mutants._ordinary_threads import ThreadConditionPool

HOUSEKEEPING_PERIOD_S = 30.0
LEAK_THRESHOLD_S = 60.0


class AsyncPollingPool(BlockLedger):
    """A deque; a waiter that finds it empty sleeps and looks again, backing off from 50 us to
    at most 1 ms, until its deadline. It declares that cap as its backoff bound."""

    backoff_bound = 0.001
    first_park = 50e-6
    backends = ("asyncio", "trio")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        deadline = None if timeout is None else anyio.current_time() + timeout
        park = self.first_park
        while not self._free:
            now = anyio.current_time()
            if deadline is not None and now >= deadline:
                return None
            await anyio.sleep(park if deadline is None else min(park, deadline - now))
            park = min(park * 2, self.backoff_bound)
        return self._taken(self._free.popleft())

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, reset and queue it."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        return True


class _Housekeeper(threading.Thread):
    """A daemon thread that runs ``work`` (written as a subclass, as much threaded code is)."""

    def __init__(self, work: Callable[[], None]) -> None:
        super().__init__(name="pool-housekeeping", daemon=True)
        self._work = work

    def run(self) -> None:
        self._work()


class HousekeepingThreadPool(ThreadConditionPool):
    """A Condition pool with a daemon housekeeping thread (a ``threading.Thread`` subclass),
    started with the pool: every 30 s it notes, under the pool's lock, the blocks held longer
    than a minute (``suspected_leaks``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._taken_at: dict[int, float] = {}
        self.suspected_leaks: set[int] = set()
        self._closed = threading.Event()
        _Housekeeper(self._housekeeping).start()

    def _taken(self, block: Block) -> Block:
        self._taken_at[block.id] = time.monotonic()  # under the condition's lock
        return super()._taken(block)

    def _last_reference(self, block: Block) -> bool:
        last = super()._last_reference(block)
        if last:
            self._taken_at.pop(block.id, None)
        return last

    def close(self) -> None:
        """Stop the housekeeping thread."""
        self._closed.set()

    def _housekeeping(self) -> None:
        while not self._closed.wait(HOUSEKEEPING_PERIOD_S):
            with self._cond:
                now = time.monotonic()
                self.suspected_leaks = {i for i, t in self._taken_at.items() if now - t > LEAK_THRESHOLD_S}


class BackgroundTaskPool(AsyncioConditionPool):
    """An asyncio Condition pool that starts a housekeeping task on its first acquire: every
    30 s it notes the blocks held longer than a minute (``suspected_leaks``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._taken_at: dict[int, float] = {}
        self.suspected_leaks: set[int] = set()
        self._housekeeper: asyncio.Task[None] | None = None

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        if self._housekeeper is None:
            self._housekeeper = asyncio.get_running_loop().create_task(self._housekeeping())
        return await super().acquire(timeout)

    def _taken(self, block: Block) -> Block:
        self._taken_at[block.id] = asyncio.get_running_loop().time()
        return super()._taken(block)

    def _last_reference(self, block: Block) -> bool:
        last = super()._last_reference(block)
        if last:
            self._taken_at.pop(block.id, None)
        return last

    async def _housekeeping(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HOUSEKEEPING_PERIOD_S)
            now = loop.time()
            self.suspected_leaks = {i for i, t in self._taken_at.items() if now - t > LEAK_THRESHOLD_S}


class DeferredResetThreadPool(ThreadConditionPool):
    """A Condition pool whose release queues the block for a reset thread and returns: the
    thread zeroes it, then offers it under the lock and notifies. The thread starts with the
    first release and retires once it has been idle for ``IDLE_S`` (a pool that is dropped
    leaves no thread behind), deciding so under the lock from its count of blocks handed over
    and not yet offered; ``_resets`` is a plain ``queue.SimpleQueue``."""

    IDLE_S = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resets: queue.SimpleQueue[Block] = queue.SimpleQueue()
        self._resetting = 0  # blocks handed to the reset thread and not offered yet
        self._worker: threading.Thread | None = None

    def release(self, block: Block) -> bool:
        """One reference less; at the last, hand the block to the reset thread."""
        with self._cond:
            if not self._last_reference(block):
                return False
            self._resetting += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._reset_loop, name="pool-reset", daemon=True)
                self._worker.start()
        self._resets.put(block)
        return True

    def _reset_loop(self) -> None:
        while (block := self._next_reset()) is not None:
            self._reset(block)  # zeroed, then FREE: before anyone can take it
            self._offer(block)

    def _next_reset(self) -> Block | None:
        """The next block handed over; None once the thread has been idle for ``IDLE_S`` with
        nothing outstanding (it retires, and the next release starts another)."""
        while True:
            try:
                return self._resets.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._cond:
                    if self._resetting == 0:
                        self._worker = None
                        return None

    def _offer(self, block: Block) -> None:
        with self._cond:
            self._resetting -= 1
            self._free.append(block)
            self._cond.notify()


class ExecutorResetThreadPool(ThreadConditionPool):
    """A Condition pool whose release submits the block's reset and offer to a one-thread
    ``concurrent.futures.ThreadPoolExecutor`` and returns: the executor's thread zeroes the
    block, then offers it under the lock and notifies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool-reset")

    def release(self, block: Block) -> bool:
        """One reference less; at the last, hand the block's reset to the executor."""
        with self._cond:
            if not self._last_reference(block):
                return False
        self._executor.submit(self._reset_and_offer, block)
        return True

    def _reset_and_offer(self, block: Block) -> None:
        self._reset(block)  # zeroed, then FREE: before anyone can take it
        with self._cond:
            self._free.append(block)
            self._cond.notify()

    def close(self) -> None:
        """Let the executor's thread go once the resets handed to it are done."""
        self._executor.shutdown(wait=False)


class DeferredResetTaskPool(AsyncioConditionPool):
    """An asyncio Condition pool whose release schedules the reset as a task and returns: the
    task zeroes the block and offers it under the condition."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resets: set[asyncio.Task[None]] = set()  # a task needs a reference until it is done

    async def release(self, block: Block) -> bool:
        """One reference less; at the last, schedule the block's reset and offer."""
        if not self._last_reference(block):
            return False
        task = asyncio.get_running_loop().create_task(self._reset_and_offer(block))
        self._resets.add(task)
        task.add_done_callback(self._resets.discard)
        return True

    async def _reset_and_offer(self, block: Block) -> None:
        async with self._cond:
            self._reset(block)
            self._free.append(block)
            self._cond.notify()
