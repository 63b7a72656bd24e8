"""Realistic bugs planted in the ordinary-way pools: at least one per design.

Each is a slip a developer makes with that primitive: an await between taking a unit and the
block, a give-up path that forgets what it was handed, an ``if`` where a ``while`` belongs, an
offer before the reset, a housekeeper that reclaims what is still in use. (The asyncio-only
pools' mutants are in ``_mutants_asyncio``.)
"""

from __future__ import annotations

import asyncio
import time

import anyio
import trio

from kvstress.mutants._block import HELD, Block, seconds
from kvstress.mutants._ordinary_anyio import (
    AnyioCapacityLimiterPool,
    AnyioConditionPool,
    AnyioSemaphorePool,
    AnyioStreamPool,
)
from kvstress.mutants._ordinary_background import (
    AsyncPollingPool,
    DeferredResetTaskPool,
    DeferredResetThreadPool,
    ExecutorResetThreadPool,
    HousekeepingThreadPool,
)
from kvstress.mutants._ordinary_threads import (
    ThreadConditionPool,
    ThreadPollingPool,
    ThreadQueuePool,
    ThreadSemaphorePool,
)
from kvstress.mutants._ordinary_trio import TrioCapacityLimiterPool, TrioChannelPool, TrioSemaphorePool

# -- asyncio ----------------------------------------------------------------------------------
from kvstress.pool._state import BlockState

# -- anyio ------------------------------------------------------------------------------------


class AnyioSemaphoreResetAfterOfferPool(AnyioSemaphorePool):
    """release queues the block and hands its unit on, then zeroes it: the next holder can read
    the last one's K/V."""

    expected = ("dirty-read",)

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._free.append(block)
        self._units.release()
        await anyio.sleep(0)  # the copy-out to the host, say
        self._reset(block)  # BUG: reset after the offer
        return True


class AnyioSemaphoreUnitPerReferencePool(AnyioSemaphorePool):
    """release gives a unit back for every reference dropped, not only the last: after a shared
    block is released the semaphore promises more blocks than the deque holds."""

    expected = ("crash", "lost-block", "shared-block")

    async def release(self, block: Block) -> bool:
        was_held = block.refcount >= 1
        last = self._last_reference(block)
        if last:
            self._reset(block)
            self._free.append(block)
        if was_held:
            self._units.release()  # BUG: a unit per reference
        return last


class AnyioStreamGiveUpForgetsPool(AnyioStreamPool):
    """A receive that returns just as the deadline passes is treated as a timeout, and the block
    it was handed is forgotten: a timeout racing a hand-off loses a block."""

    expected = ("lost-block", "lost-wakeup")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                return self._got(self._receive.receive_nowait())
            except anyio.WouldBlock:
                return None
        deadline = None if timeout is None else anyio.current_time() + timeout
        with anyio.move_on_after(timeout):
            block = await self._receive.receive()
            if deadline is not None and anyio.current_time() >= deadline:
                self._free.remove(block)
                return None  # BUG: gives up, and forgets the block it was handed
            return self._got(block)
        return None


class AnyioConditionNotifyWhenEmptyPool(AnyioConditionPool):
    """release notifies only when the deque was empty before: with two waiters and two releases
    in a row, the second release notifies nobody (a waiter without a timeout then never
    returns: a hang)."""

    expected = ("lost-wakeup", "hang")

    async def release(self, block: Block) -> bool:
        with anyio.CancelScope(shield=True):
            async with self._cond:
                if not self._last_reference(block):
                    return False
                self._reset(block)
                was_empty = not self._free
                self._free.append(block)
                if was_empty:  # BUG: the "it was empty, so someone may wait" shortcut
                    self._cond.notify()
        return True


class AnyioLimiterPerTaskPool(AnyioCapacityLimiterPool):
    """Tokens are borrowed for the calling task (``acquire()``), as the limiter's first example
    shows, and given back by whichever task releases: a block released by another task than
    the one that took it raises."""

    expected = ("crash",)

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                self._limiter.acquire_nowait()
            except anyio.WouldBlock:
                return None
            return self._take(anyio.get_current_task())
        with anyio.move_on_after(timeout):
            await self._limiter.acquire()
            return self._take(anyio.get_current_task())
        return None

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._free.append(block)
        self._tokens.pop(block.id)
        self._limiter.release()  # BUG: on behalf of whoever releases
        return True


# -- trio -------------------------------------------------------------------------------------


class TrioSemaphoreCheckpointAfterUnitPool(TrioSemaphorePool):
    """A checkpoint between the unit and the block: a cancellation there keeps the unit."""

    expected = ("lost-block", "lost-wakeup")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        if timeout == 0:
            try:
                self._units.acquire_nowait()
            except trio.WouldBlock:
                return None
            return self._taken(self._free.popleft())
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            await self._units.acquire()
            await trio.sleep(0)  # BUG: a cancellation here strands the unit
            return self._taken(self._free.popleft())
        return None


class TrioChannelSendBeforeResetPool(TrioChannelPool):
    """release sends the block back, then zeroes it after a checkpoint: a waiting receiver gets
    it first and reads the old K/V (or, looked at in that window, the free queue holds a block
    still RELEASING)."""

    expected = ("dirty-read", "queue-corruption")

    async def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._put(block)
        await trio.sleep(0)
        self._reset(block)  # BUG: after the send
        return True


class TrioLimiterForgetsTokenPool(TrioCapacityLimiterPool):
    """A timed acquire that got its token just as it was cancelled returns None and keeps the
    token: a cancellation racing the hand-off strands capacity."""

    expected = ("lost-block", "lost-wakeup")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        token = object()
        if timeout == 0:
            try:
                self._limiter.acquire_on_behalf_of_nowait(token)
            except trio.WouldBlock:
                return None
            return self._take(token)
        with trio.move_on_after(float("inf") if timeout is None else timeout) as scope:
            await self._limiter.acquire_on_behalf_of(token)
            await trio.sleep(0)  # BUG: cancelled here, the token is never given back
        if scope.cancelled_caught:
            return None
        return self._take(token)


# -- threading and queue ------------------------------------------------------------------------


class ThreadSemaphoreUnitBeforeQueuePool(ThreadSemaphorePool):
    """release gives the unit back before it queues the block: a waiter woken by the unit can
    find the deque empty."""

    expected = ("crash",)

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        self._units.release()  # BUG: the unit goes out before the block is there
        self._free.append(block)
        return True


class ThreadConditionTimedOutDropsNotifyPool(ThreadConditionPool):
    """A deadline loop that trusts ``Condition.wait``'s answer: False means it timed out, so it
    gives up. But a notify that picks a waiter as its timeout expires is spent on it (the
    waiter was taken off the condition's list) while ``wait`` still answers False: the waiter
    leaves without the block, and another waiter sleeps beside it until its own timeout.
    ``wait_for`` looks again; so must a hand-written loop, or pass the notify on."""

    expected = ("lost-wakeup",)

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._free:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                if not self._cond.wait(remaining):
                    return None  # BUG: a notify spent on this timed-out waiter is dropped
            return self._taken(self._free.popleft())


class ThreadConditionIfNotWhilePool(ThreadConditionPool):
    """An ``if`` where the ``while`` belongs: a waiter notified after another thread took the
    block wakes to an empty deque."""

    expected = ("crash", "lost-block", "timeout-early")

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        with self._cond:
            if not self._free:
                if timeout == 0:
                    return None
                self._cond.wait(timeout)  # BUG: not re-checked
                if not self._free:
                    return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        with self._cond:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._cond.notify_all()
        return True


class ThreadQueuePutBeforeResetPool(ThreadQueuePool):
    """release puts the block back, then zeroes it: a waiter gets it dirty, or takes it before
    the reset and then holds a block the reset marks FREE under it."""

    expected = ("dirty-read", "illegal-transition")

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._put(block)
        self._reset(block)  # BUG: after the put
        return True


class ThreadQueueUnlockedGuardPool(ThreadQueuePool):
    """release checks that the block is held before it takes the lock that drops the reference:
    two releases of one handle at once (an abort path beside the normal finish) both pass the
    check, and the block is queued twice (Netty's Recycler, issue 9433, fixed by one CAS)."""

    expected = ("queue-corruption", "shared-block", "lost-block")

    def release(self, block: Block) -> bool:
        if block.state not in HELD or block.refcount < 1:  # BUG: the guard, outside the lock
            return False
        with self._guard:
            block.refcount -= 1
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
        self._reset(block)
        self._put(block)
        return True


class ThreadPollingUnlockedCheckPool(ThreadPollingPool):
    """The poll checks for a free block outside the lock, then pops under it: two pollers can
    both see the last block."""

    expected = ("crash",)

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        park = self.first_park
        while True:
            if self._free:  # BUG: checked without the lock
                with self._lock:
                    return self._taken(self._free.popleft())
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            time.sleep(park if deadline is None else min(park, deadline - now))
            park = min(park * 2, self.backoff_bound)


class DeferredResetSilentOfferPool(DeferredResetThreadPool):
    """The reset thread queues the block but does not notify ("the waiters poll anyway"; they
    do not): a waiter sleeps out its timeout beside a free block."""

    expected = ("lost-wakeup", "timeout-late")

    def _offer(self, block: Block) -> None:
        with self._cond:
            self._resetting -= 1
            self._free.append(block)  # BUG: no notify


class ExecutorResetUnlockedOfferPool(ExecutorResetThreadPool):
    """The executor's thread appends the block to the deque without the lock ("a deque append
    is atomic") and notifies nobody: a waiter parked on the condition sleeps out its timeout
    beside a free block (and a snapshot of the deque taken under the lock can see it change:
    "deque mutated during iteration")."""

    expected = ("lost-wakeup", "timeout-late", "crash")

    def _reset_and_offer(self, block: Block) -> None:
        self._reset(block)
        self._free.append(block)  # BUG: not under the lock, and no notify


class DeferredResetOfferFirstTaskPool(DeferredResetTaskPool):
    """The reset task offers the block first and zeroes it once "the device is done" (one turn
    of the loop later): a waiter woken by the offer takes the block with the last tenant's data."""

    expected = ("dirty-read",)

    async def _reset_and_offer(self, block: Block) -> None:
        async with self._cond:
            block.state = BlockState.FREE
            self._free.append(block)  # BUG: offered before it is zeroed
            self._cond.notify()
        await asyncio.sleep(0)
        block.data.zero_()


class HousekeepingReaperPool(HousekeepingThreadPool):
    """The housekeeping thread reclaims blocks held longer than its threshold (every 10 ms,
    held over 20 ms) and queues them again: a holder still writing shares its block."""

    expected = (
        "shared-block",
        "lost-block",
        "double-release",
        "illegal-transition",
        "dirty-read",
        "refcount",
    )

    def _housekeeping(self) -> None:
        while not self._closed.wait(0.01):
            with self._cond:
                now = time.monotonic()
                for block_id, since in list(self._taken_at.items()):
                    if now - since > 0.02:  # BUG: a long hold is not a leak
                        block = self._blocks[block_id]
                        del self._taken_at[block_id]
                        block.refcount = 0
                        self._reset(block)
                        self._free.append(block)
                        self._cond.notify()


class HousekeepingScrubOutsideLockPool(HousekeepingThreadPool):
    """The housekeeping thread scrubs the idle blocks every 2 ms (zeroes them again, against
    stray writes), reading the free list under the pool's lock and zeroing outside it: a block
    taken and written in between is zeroed under its holder (Commons Pool's evictor testing an
    object a borrower had just taken, when its ``startEvictionTest`` guard was skipped)."""

    expected = ("shared-block", "dirty-read")

    def _housekeeping(self) -> None:
        while not self._closed.wait(0.002):
            with self._cond:
                idle = list(self._free)
            for block in idle:  # BUG: outside the lock: a caller may hold it by now
                block.data.zero_()


# -- polling ----------------------------------------------------------------------------------


class AsyncPollingUncappedPool(AsyncPollingPool):
    """The backoff doubles without its cap while the pool still declares 1 ms: a waiter sleeps
    far past a free block, and past its own deadline."""

    expected = ("lost-wakeup", "timeout-late")

    async def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        deadline = None if timeout is None else anyio.current_time() + timeout
        park = self.first_park
        while not self._free:
            if deadline is not None and anyio.current_time() >= deadline:
                return None
            await anyio.sleep(park)  # BUG: neither capped nor cut at the deadline
            park *= 2
        return self._taken(self._free.popleft())
