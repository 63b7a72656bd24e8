"""The async block pool, on anyio (asyncio and trio): one event loop, a FIFO of parked waiters."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel

from kvstress._checks import check_batch_size, check_timeout
from kvstress._errors import PoolExhausted
from kvstress.pool._base import PoolBase
from kvstress.pool._block import Block
from kvstress.pool._core import ReleaseStep

_LAST, _DOUBLE = ReleaseStep.LAST, ReleaseStep.DOUBLE


class AsyncBlockPool(PoolBase):
    """A KV-cache block pool for async tasks. Implements the kvstress pool protocol (async flavour).

    ``acquire`` and ``release`` are coroutines; use the pool from one event loop. Time is the
    loop's clock (``anyio.current_time``), so trio's MockClock and kvstress' controlled loop
    drive timeouts on virtual time.

    Cancellation: a cancelled ``acquire`` never holds a block and passes on a wake-up it
    received, so no waiter is left asleep beside a free block. It takes a block only where no
    anyio or trio cancellation can strike; plain asyncio's ``Task.cancel`` (``asyncio.timeout``,
    ``wait_for``) goes through anyio's shields, so a block taken just before such a
    cancellation is given back before the cancellation goes on. ``release`` never suspends: it
    always completes, whatever cancels its caller.
    """

    def _setup(self) -> None:
        # Invariant: every event in _waiters is unset; a set event has been removed. The same
        # holds for _batch_waiters, whose entries say how many blocks each waits for.
        self._waiters: deque[anyio.Event] = deque()
        self._batch_waiters: list[tuple[int, anyio.Event]] = []

    async def acquire(self, timeout: float | None = None) -> Block | None:
        """Take a FREE block (ACQUIRED, refcount 1, zeroed); wait up to ``timeout`` seconds.

        ``None`` waits without limit, ``0`` tries once. Returns None when the time is up.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        task = _asyncio_task()
        holder: object
        if task is None:  # trio: anyio's checkpoints
            await anyio.lowlevel.checkpoint_if_cancelled()
            holder, now = anyio.get_current_task(), anyio.current_time()
        else:
            holder, now = task, task.get_loop().time()  # what anyio.current_time() reads there
        core = self._core
        block_id = core.take(now, holder)
        if block_id >= 0:
            core.waits.add(0.0)
            block = self._handed_out(block_id, now)
            try:
                await _yield_holding(task)
            except BaseException:  # cancelled at the yield: the block is given back first
                self._release_now(block_id, block.generation)
                raise
            return block
        if timeout == 0:
            core.timeouts += 1
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return None
        return await self._wait_for_block(now, timeout, holder)

    async def _wait_for_block(self, start: float, timeout: float | None, holder: object) -> Block | None:
        core = self._core
        deadline = None if timeout is None else start + timeout
        while True:
            waiter = anyio.Event()
            self._waiters.append(waiter)
            remaining = None if deadline is None else deadline - anyio.current_time()
            try:
                with anyio.move_on_after(remaining):
                    await waiter.wait()
            except BaseException:  # cancelled: pass on a wake-up we got but cannot use
                self._forget(waiter, pass_on=True)
                raise
            self._forget(waiter, pass_on=False)
            # No await from here on: what we take cannot be lost to a cancellation.
            now = anyio.current_time()
            block_id = core.take(now, holder)
            if block_id >= 0:
                core.waits.add(now - start)
                if core.free_count > 0:
                    self._notify()
                return self._handed_out(block_id, now)
            if deadline is not None and now >= deadline:
                core.timeouts += 1
                core.waits.add(now - start)
                return None

    async def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        """Take ``n`` FREE blocks at once, with no suspension between them; wait up to ``timeout``.

        All or nothing: ``n`` blocks, or None (holding nothing) when they do not all come in
        time. A waiting call holds no block and holds no other acquirer back: single acquires
        take blocks as they free up, and it takes its ``n`` when ``n`` are free at once, which
        wakes it. Cancel-safe as ``acquire``: a cancelled call holds nothing.
        """
        n = check_batch_size(n, self.num_blocks)
        if timeout is not None:
            timeout = check_timeout(timeout)
        await anyio.lowlevel.checkpoint_if_cancelled()
        core, holder = self._core, _current_task()
        now = anyio.current_time()
        block_ids = core.take_many(n, now, holder)
        if block_ids is not None:
            core.waits.add(0.0)
            blocks = self._handed_out_many(block_ids, now)
            try:
                await anyio.lowlevel.cancel_shielded_checkpoint()
            except BaseException:  # plain Task.cancel() strikes through the shield
                self._release_all_now(blocks)
                raise
            return blocks
        if timeout == 0:
            core.timeouts += 1
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return None
        return await self._wait_for_many(n, now, timeout, holder)

    async def _wait_for_many(
        self, n: int, start: float, timeout: float | None, holder: object
    ) -> list[Block] | None:
        core = self._core
        deadline = None if timeout is None else start + timeout
        while True:
            entry = (n, anyio.Event())
            self._batch_waiters.append(entry)
            remaining = None if deadline is None else deadline - anyio.current_time()
            try:
                with anyio.move_on_after(remaining):
                    await entry[1].wait()
            finally:  # a batch wake-up is no unit another waiter needs: nothing to pass on
                if not entry[1].is_set():
                    self._batch_waiters.remove(entry)
            # No await from here on: what we take cannot be lost to a cancellation.
            now = anyio.current_time()
            block_ids = core.take_many(n, now, holder)
            if block_ids is not None:
                core.waits.add(now - start)
                if core.free_count > 0:  # singles woken for blocks this batch took re-park
                    self._notify(core.free_count)
                return self._handed_out_many(block_ids, now)
            if deadline is not None and now >= deadline:
                core.timeouts += 1
                core.waits.add(now - start)
                return None

    def _release_all_now(self, blocks: list[Block]) -> None:
        """Give back a batch this call took but cannot hand over (its caller was cancelled)."""
        for block in blocks:
            self._release_now(block.id, block.generation)

    def _forget(self, waiter: anyio.Event, *, pass_on: bool) -> None:
        """Leave the queue (a woken waiter has left it already); maybe hand the wake-up on."""
        if not waiter.is_set():
            self._waiters.remove(waiter)
        elif pass_on and self._core.free_count > 0:
            self._notify()

    def _notify(self, count: int = 1) -> None:
        waiters = self._waiters
        for _ in range(min(count, len(waiters))):
            waiters.popleft().set()
        if self._batch_waiters:
            self._wake_batches()

    def _wake_batches(self) -> None:
        """Wake every batch waiter whose ``n`` blocks are free now (each then tries to take)."""
        free = self._core.free_count
        ready = [entry for entry in self._batch_waiters if entry[0] <= free]
        for entry in ready:
            self._batch_waiters.remove(entry)
            entry[1].set()

    async def release(self, block: Block) -> bool:
        """Drop one reference; the last one resets the block and returns it to the queue.

        Completes without suspending, so no cancellation can cut it short (and it is no
        checkpoint). Returns True only when this call returned the block; a double release (or
        a stale handle) changes nothing, is counted, logged at WARNING, and returns False.
        """
        block_id, generation = self._unwrap(block)
        return self._release_now(block_id, generation)

    def _release_now(self, block_id: int, generation: int) -> bool:
        step = self._core.begin_release(block_id, generation, _loop_time())
        if step is _LAST:
            self._storage.reset(block_id)  # strictly before the offer below
            self._core.finish_release(block_id)
            self._offered((block_id,))
            self._notify()
            return True
        if step is _DOUBLE:
            self._log_double_release(block_id)
        return False

    async def release_many(self, blocks: Sequence[Block]) -> list[bool]:
        """``release`` each block, with one reset for all whose last reference goes (one device
        operation instead of one per block), completed before any of them is offered.

        Completes without suspending, as ``release``. Returns, per block, True where this call
        returned it.
        """
        block_ids, gens = self._unwrap_many(blocks)  # misuse raises before any change
        steps = self._core.begin_release_many(block_ids, gens, anyio.current_time())
        last = self._returned(block_ids, steps)
        self._storage.reset_many(last)  # strictly before the offers below
        self._core.finish_release_many(last)
        self._offered(last)
        self._notify(len(last))
        return [True] * len(steps) if last is block_ids else [step is _LAST for step in steps]

    @asynccontextmanager
    async def block(self, timeout: float | None = None) -> AsyncIterator[Block]:
        """``async with pool.block(timeout) as b:`` acquires, and always releases.

        Raises PoolExhausted when no block comes within ``timeout``.
        """
        acquired = await self.acquire(timeout)
        if acquired is None:
            raise PoolExhausted(f"no free block within {timeout} s ({self.num_blocks} blocks, all held)")
        try:
            yield acquired
        finally:
            await self.release(acquired)

    def _now(self) -> float:
        try:
            return anyio.current_time()
        except Exception:  # read from sync code outside the loop (a dump): asyncio's clock
            return time.monotonic()


def _asyncio_task() -> asyncio.Task[object] | None:
    """The running asyncio task; None where no asyncio loop runs here (trio)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


async def _yield_holding(task: asyncio.Task[object] | None) -> None:
    """The schedule point of an acquire that took its block. On trio, anyio's shielded
    checkpoint. On asyncio, a bare yield: anyio delivers a cancel scope's cancellation to a task
    parked on it by ``Task.cancel()``, as plain asyncio code would, so either way a cancellation
    arriving here raises, and the caller gives the block back before it goes on. (anyio's
    shielded checkpoint costs a cancel scope and two backend look-ups; the bare yield is what
    lets the pair match an anyio Semaphore's.)"""
    if task is None:
        await anyio.lowlevel.cancel_shielded_checkpoint()
    else:
        await asyncio.sleep(0)


def _loop_time() -> float:
    """``anyio.current_time()``, read straight from the asyncio loop where one runs."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return anyio.current_time()


def _current_task() -> object:
    """The running task, for the leak tracker: asyncio's own task where the loop is asyncio
    (a tenth of the cost of ``anyio.get_current_task``), anyio's record of it elsewhere."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no asyncio loop runs here: trio
        return anyio.get_current_task()
