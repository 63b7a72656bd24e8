"""Mutants of ``AsyncConditionPool`` (anyio): each plants one realistic bug; ``# BUG`` marks it.

``expected`` names the invariant ids a good harness may report for the bug: the one it causes
first, and the ones its consequences show as when a check meets them first.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.lowlevel
import torch

from kvstress.mutants._async_pool import AsyncConditionPool
from kvstress.mutants._block import Block, seconds
from kvstress.pool._state import BlockState


class AsyncResetAfterOfferPool(AsyncConditionPool):
    """Release queues the block and notifies, then scrubs it in a coroutine that yields first (to
    keep the memset off the lock): the woken waiter runs in between and gets the old K/V."""

    expected = ("dirty-read", "shared-block")

    def _reset(self, block: Block) -> None:
        pass  # done by release once the lock is dropped, below

    async def release(self, block: Block) -> bool:
        returned = await super().release(block)
        if returned:
            await self._scrub(block)  # BUG: the block is already back in the queue
        return returned

    async def _scrub(self, block: Block) -> None:
        await anyio.lowlevel.checkpoint()
        block.data.zero_()


class AsyncTakeThenYieldPool(AsyncConditionPool):
    """A successful acquire yields once more before returning (so a task acquiring in a loop does
    not starve the others): a cancellation there drops the block it holds, for good."""

    expected = ("lost-block",)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        block = await super().acquire(timeout)
        if block is not None:
            await anyio.lowlevel.checkpoint()  # BUG: a cancellable await while holding the block
        return block


class AsyncShieldedYieldPool(AsyncConditionPool):
    """As ``AsyncTakeThenYieldPool``, but the yield after the take is shielded, which holds
    against anyio and trio cancellation: plain asyncio ``Task.cancel()`` (``asyncio.timeout``,
    ``wait_for``, a server dropping a request) strikes through anyio's shield, and the block is
    lost. kvstress' own AsyncBlockPool had this bug."""

    expected = ("lost-block",)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        block = await super().acquire(timeout)
        if block is not None:
            await anyio.lowlevel.cancel_shielded_checkpoint()  # BUG: Task.cancel() still lands here
        return block


class AsyncShieldedReleaseYieldPool(AsyncConditionPool):
    """Release unpins the block, then yields, shielded, so that the memset of a large block
    waits its turn on the loop, then resets and offers it. anyio and trio cancellation cannot
    cut it there, but plain asyncio ``Task.cancel()`` strikes through anyio's shield: the block
    is left RELEASING, neither held nor free, for ever."""

    expected = ("lost-block",)

    async def release(self, block: Block) -> bool:
        with anyio.CancelScope(shield=True):
            async with self._cond:
                if not self._unpin(block):
                    return False
            await anyio.lowlevel.cancel_shielded_checkpoint()  # BUG: Task.cancel() still lands here
            async with self._cond:
                self._reset(block)
                self._offer(block)
        return True


class AsyncUnshieldedReleasePool(AsyncConditionPool):
    """Release zeroes the block row by row outside the lock, yielding between rows so a big block
    does not stall the loop, with no shield: a release cancelled there leaves the block
    RELEASING, neither held nor free, for ever."""

    expected = ("lost-block",)

    async def release(self, block: Block) -> bool:
        async with self._cond:  # BUG: nothing shields the steps below from a cancellation
            if not self._unpin(block):
                return False
        for row in block.data:
            row.zero_()
            await anyio.lowlevel.checkpoint()
        async with self._cond:
            self._offer(block)
        return True


class AsyncStaleCountPool(AsyncConditionPool):
    """Release reads the free counter before waiting for the lock ("one event loop, so no race")
    and stores ``read + 1`` under it: an acquire that ran while it waited is undone."""

    expected = ("counter-mismatch",)

    async def release(self, block: Block) -> bool:
        with anyio.CancelScope(shield=True):
            free = self._count
            async with self._cond:  # BUG: this await lets others change the count just read
                returned = self._drop(block)
                if returned:
                    self._count = free + 1
        return returned

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._free.append(block)  # counted by release
        self._wake()


class AsyncSilentReleasePool(AsyncConditionPool):
    """Release queues the block but notifies nobody: a waiter sleeps out its whole timeout beside
    a free block (and takes it only at its deadline)."""

    expected = ("lost-wakeup",)

    def _wake(self) -> None:
        pass  # BUG: self._cond.notify() is missing


class AsyncMillisecondsPool(AsyncConditionPool):
    """The deadline reads the timeout as milliseconds, as the serving config spells it: a waiter
    gives up after a thousandth of the time it was given."""

    expected = ("timeout-early",)

    def _deadline(self, timeout: float | None) -> float | None:
        return None if timeout is None else anyio.current_time() + timeout / 1000  # BUG: it is s


class AsyncTryOncePool(AsyncConditionPool):
    """Any finite timeout is taken for "do not wait" (only 0 means that): an exhausted pool
    answers None at once to acquire(timeout=0.2)."""

    expected = ("timeout-early",)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        if seconds(timeout) is not None and not self._free:
            return None  # BUG: should wait up to timeout seconds
        return await super().acquire(timeout)


class AsyncRearmedTimeoutPool(AsyncConditionPool):
    """A waiter woken for a block that someone else took waits its whole patience again, not what
    is left of it: a timed acquire can return long after its deadline."""

    expected = ("timeout-late",)

    async def _take_by(self, deadline: float | None) -> Block | None:
        patience = None if deadline is None else deadline - anyio.current_time()
        while not self._free:
            if deadline is not None and anyio.current_time() >= deadline:
                return None
            await self._wait(patience)  # BUG: should be deadline - now
        return self._take()


class AsyncSpinPool(AsyncConditionPool):
    """A waiter polls: it drops the lock, yields with ``anyio.sleep(0)`` and looks again, instead
    of parking on the condition. It is runnable again at once: a spin."""

    expected = ("busy-wait",)

    async def _wait(self, remaining: float | None) -> None:
        self._cond.release()
        try:
            await anyio.sleep(0)  # BUG: a yield is not a wait
        finally:
            with anyio.CancelScope(shield=True):
                await self._cond.acquire()


class AsyncHoldTimePool(AsyncConditionPool):
    """Acquire notes when each block was taken and every release pops the note to log the hold
    time: the last release of a shared block finds no note (KeyError)."""

    expected = ("crash",)

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_blocks, block_shape, dtype=dtype, device=device)
        self._taken_at: dict[int, float] = {}
        self.hold_times: list[float] = []

    def _take(self) -> Block:
        block = super()._take()
        self._taken_at[block.id] = anyio.current_time()
        return block

    async def release(self, block: Block) -> bool:
        taken_at = self._taken_at.pop(block.id)  # BUG: every release pops it, not only the last
        self.hold_times.append(anyio.current_time() - taken_at)
        return await super().release(block)


class AsyncStillReleasingPool(AsyncConditionPool):
    """Release queues the block without setting it FREE ("acquire sets the state anyway"): the
    free queue holds a RELEASING block."""

    expected = ("queue-corruption", "illegal-transition")

    def _offer(self, block: Block) -> None:
        self._free.append(block)  # BUG: block.state = BlockState.FREE is missing
        self._count += 1
        self._wake()


class AsyncLockLeakPool(AsyncConditionPool):
    """Acquire takes the lock by hand, and its try-once fast path returns before the ``try``
    whose ``finally`` unlocks: after one acquire(timeout=0) on an exhausted pool, every other
    task waits for the lock for ever (and the task that leaked it gets a RuntimeError from
    anyio's Lock the next time it asks for it)."""

    expected = ("hang", "crash")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        deadline = self._deadline(seconds(timeout))
        await self._cond.acquire()
        if timeout == 0 and not self._free:
            return None  # BUG: returns with the lock held
        try:
            return await self._take_by(deadline)
        finally:
            self._cond.release()
