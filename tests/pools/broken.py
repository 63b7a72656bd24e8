"""Deliberately broken pools: each plants exactly one realistic bug in a correct simple pool.

Each class names, in ``expected``, the invariant id a checker must report for it, and says in a
one-line docstring what is wrong. The bugs are deterministic where they can be ("every 3rd
release"), so a short sequential program shows them; the timing bugs show on any timed acquire
from an exhausted pool. ``# BUG`` marks the planted line.
"""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel

from kvstress import BlockState

from ._simple import HELD, Block, SimpleAsyncPool, SimpleThreadedPool

# --- dirty-read: a freshly acquired block's data is not all zeros -----------------------------


class NoResetPool(SimpleThreadedPool):
    """Release never zeroes the block, so the next holder reads the previous one's K/V."""

    expected = "dirty-read"

    def _reset(self, block: Block) -> None:
        pass  # BUG: the reset was dropped


class PartialResetPool(SimpleThreadedPool):
    """Release zeroes all of the block but its last element (an off-by-one in the reset)."""

    expected = "dirty-read"

    def _reset(self, block: Block) -> None:
        block.data.view(-1)[:-1].zero_()  # BUG: should be [:], not [:-1]


class ResetAfterOfferPool(SimpleThreadedPool):
    """Release offers the block first and zeroes it 1 ms later outside the lock: a dirty-read window."""

    expected = "dirty-read"

    def _reset(self, block: Block) -> None:
        pass  # moved to after the offer, below

    def release(self, block: Block) -> bool:
        returned = super().release(block)
        if returned:
            time.sleep(0.001)  # BUG: the block is already in the queue, still dirty
            block.data.zero_()
        return returned


class AsyncNoResetPool(SimpleAsyncPool):
    """Async release never zeroes the block, so the next holder reads the previous one's K/V."""

    expected = "dirty-read"

    def _reset(self, block: Block) -> None:
        pass  # BUG: the reset was dropped


# --- shared-block, counter-mismatch, queue-corruption, lost-block -----------------------------


class DoubleHandoutPool(SimpleThreadedPool):
    """Every 3rd acquire peeks the queue head (q[0]) instead of popping it, so that block goes out twice."""

    # Two faces: the handed-out block still sits in the queue (queue-corruption), and it goes
    # out a second time (shared-block); whichever a check meets first is right.
    expected = ("shared-block", "queue-corruption")

    _acquires = 0  # a count per pool: the first += gives the instance its own

    def _take(self) -> Block:
        self._acquires += 1
        if self._acquires % 3:
            return super()._take()
        block = self._free[0]  # BUG: a peek, not a popleft (nor a count, so the counter agrees)
        block.state = BlockState.ACQUIRED
        block.refcount = 1
        return block


class ReHandoutPool(SimpleThreadedPool):
    """Every 3rd acquire hands out the block handed out last, again, leaving queue and counter alone."""

    expected = "shared-block"

    _acquires = 0  # a count per pool: the first += gives the instance its own
    _last: Block | None = None

    def _take(self) -> Block:
        self._acquires += 1
        last = self._last
        if self._acquires % 3 == 0 and last is not None and last.state in HELD:
            return last  # BUG: a stale cache of the last handout is served again
        self._last = super()._take()
        return self._last


class CounterDriftPool(SimpleThreadedPool):
    """Acquire reserves a count before waiting and keeps the reservation when it times out."""

    expected = "counter-mismatch"

    def acquire(self, timeout: float | None = None) -> Block | None:
        with self._lock:
            self._count -= 1  # reserve first...
            if self._until_free(timeout):
                self._count += 1  # ...the reservation becomes _take's own count
                return self._take()
            return None  # BUG: the reservation is not given back on the empty path


class DoubleOfferPool(SimpleThreadedPool):
    """Every 4th returning release offers the block twice: it sits in the queue (and counter) twice."""

    expected = "queue-corruption"

    _offers = 0  # a count per pool: the first += gives the instance its own

    def _offer(self, block: Block) -> None:
        super()._offer(block)
        self._offers += 1
        if self._offers % 4 == 0:
            super()._offer(block)  # BUG: offered again (a retry path that did not check)


class NonFreeInQueuePool(SimpleThreadedPool):
    """Release appends the block to the queue but leaves its state RELEASING."""

    expected = "queue-corruption"

    def _offer(self, block: Block) -> None:
        self._free.append(block)  # BUG: block.state = FREE is missing
        self._count += 1
        self._wake()


class LeakOnReleasePool(SimpleThreadedPool):
    """Every 3rd returning release marks the block FREE but neither queues nor counts it: it is lost."""

    expected = "lost-block"

    _offers = 0  # a count per pool: the first += gives the instance its own

    def _offer(self, block: Block) -> None:
        self._offers += 1
        if self._offers % 3 == 0:
            block.state = BlockState.FREE  # BUG: an early return skips the append and the count
            return
        super()._offer(block)


class AsyncCancelLeakPool(SimpleAsyncPool):
    """A woken waiter takes its block, then yields once more: a cancellation there loses the block."""

    expected = "lost-block"

    async def acquire(self, timeout: float | None = None) -> Block | None:
        await anyio.lowlevel.checkpoint()
        if self._free:
            return self._take()
        if not await self._until_free(timeout):
            return None
        block = self._take()
        await anyio.lowlevel.checkpoint()  # BUG: a cancellation here drops the block we hold
        return block


# --- illegal-transition, refcount, double-release --------------------------------------------


class RetainFreePool(SimpleThreadedPool):
    """Retain on a block that is not held succeeds and increments instead of raising."""

    expected = "illegal-transition"

    def retain(self, block: Block) -> None:
        with self._lock:
            block.refcount += 1  # BUG: no check that the block is held


class MarkAnyPool(SimpleThreadedPool):
    """mark_in_use on a block that is not ACQUIRED (a FREE one, say) sets IN_USE instead of raising."""

    expected = "illegal-transition"

    def mark_in_use(self, block: Block) -> None:
        with self._lock:
            block.state = BlockState.IN_USE  # BUG: no check of the state it leaves


class RetainNoopPool(SimpleThreadedPool):
    """Retain checks the block but never increments, so the first release frees a shared block."""

    expected = "refcount"

    def retain(self, block: Block) -> None:
        with self._lock:
            if block.state not in HELD or block.refcount < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} in {block.state.name}")
            # BUG: block.refcount += 1 is missing


class AcquireRefcountTwoPool(SimpleThreadedPool):
    """Acquire counts the caller's reference twice (refcount 2), so one release never returns the block."""

    expected = "refcount"

    def _take(self) -> Block:
        block = super()._take()
        block.refcount += 1  # BUG: the caller's reference is already counted
        return block


class DoubleReleaseTruePool(SimpleThreadedPool):
    """Release of a FREE block returns True (changing nothing) instead of False."""

    expected = "double-release"

    def release(self, block: Block) -> bool:
        if block.state == BlockState.FREE:
            return True  # BUG: should be False
        return super().release(block)


class DoubleReleaseOfferPool(SimpleThreadedPool):
    """Release of a FREE block queues it again and counts it (the guard re-offers instead of refusing)."""

    expected = "double-release"

    def release(self, block: Block) -> bool:
        with self._lock:
            if block.state == BlockState.FREE:
                self._offer(block)  # BUG: a double release must change nothing
                return False
            return self._drop(block)


# --- timeout-early, timeout-late, busy-wait, lost-wakeup -------------------------------------


class EarlyTimeoutPool(SimpleThreadedPool):
    """Acquire waits a tenth of its timeout before giving up."""

    expected = "timeout-early"

    def acquire(self, timeout: float | None = None) -> Block | None:
        return super().acquire(None if timeout is None else timeout / 10)  # BUG


class MillisecondsPool(SimpleThreadedPool):
    """Acquire reads its timeout as milliseconds: it waits timeout/1000 s."""

    expected = "timeout-early"

    def acquire(self, timeout: float | None = None) -> Block | None:
        return super().acquire(None if timeout is None else timeout / 1000)  # BUG: s taken as ms


LATE_BY = 2.0
"""How late LateTimeoutPool gives up: more than the load-aware slack (0.25 s times the load per
core) up to a load of 8 per core. At 0.7 s, a full suite beside three other jobs (load 3 per
core: a slack of 1.07 s) took it for on time and then, its wait stretched past the test's 1 s
hang bound, for a hang; at 0.3 s, a load of 2.5 per core hid it."""


class LateTimeoutPool(SimpleThreadedPool):
    """Acquire waits timeout*4 + LATE_BY s before giving up."""

    expected = "timeout-late"
    hang_bound = 5.0  # a test's hang bound for it: past LATE_BY, with room for a loaded machine

    def acquire(self, timeout: float | None = None) -> Block | None:
        return super().acquire(None if timeout is None else timeout * 4 + LATE_BY)  # BUG


class SpinPool(SimpleThreadedPool):
    """A waiter spins, dropping and retaking the lock in a tight loop, instead of sleeping (deadline kept)."""

    expected = "busy-wait"

    def _wait(self, remaining: float | None) -> None:
        self._lock.release()  # BUG: no sleep between looks at the queue
        self._lock.acquire()


class AsyncSpinPool(SimpleAsyncPool):
    """A waiter loops on ``await anyio.sleep(0)`` until its deadline instead of parking."""

    expected = "busy-wait"

    async def _wait(self, remaining: float | None) -> bool:
        await anyio.sleep(0)  # BUG: yields, but is runnable again at once
        return False


class NoNotifyPool(SimpleThreadedPool):
    """Release never notifies: a waiter sleeps out its whole timeout and returns None beside a free block."""

    expected = "lost-wakeup"

    def _wake(self) -> None:
        pass  # BUG: self._not_empty.notify() is missing

    def _until_free(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._free:
            remaining = None if deadline is None else deadline - time.monotonic()
            if (remaining is not None and remaining <= 0) or not self._not_empty.wait(remaining):
                return False  # trusts the wait: a wait that timed out means no block came
        return True


class AsyncNoNotifyPool(SimpleAsyncPool):
    """Async release never wakes a waiter: it sleeps out its timeout and returns None beside a free block."""

    expected = "lost-wakeup"

    def _wake(self) -> None:
        pass  # BUG: the first waiter's event is never set

    async def _until_free(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else anyio.current_time() + timeout
        while not self._free:
            remaining = None if deadline is None else deadline - anyio.current_time()
            if (remaining is not None and remaining <= 0) or not await self._wait(remaining):
                return False  # trusts the wait: a wait that timed out means no block came
        return True


# --- hang, crash ------------------------------------------------------------------------------


class DeadlockPool(SimpleThreadedPool):
    """A returning release takes the (non-reentrant) lock a second time and deadlocks."""

    expected = "hang"

    def _offer(self, block: Block) -> None:
        with self._lock:  # BUG: release already holds it
            super()._offer(block)


class AsyncHangPool(SimpleAsyncPool):
    """A returning async release waits, shielded, for a "reset done" event that nothing ever sets."""

    expected = "hang"

    async def release(self, block: Block) -> bool:
        if block.state in HELD and block.refcount == 1:
            with anyio.CancelScope(shield=True):
                await anyio.Event().wait()  # BUG: no one holds this event, let alone sets it
        return await super().release(block)


class CrashPool(SimpleThreadedPool):
    """Every 5th call of release raises RuntimeError before touching the block."""

    expected = "crash"

    _releases = 0  # a count per pool: the first += gives the instance its own

    def release(self, block: Block) -> bool:
        with self._lock:
            self._releases += 1
            if self._releases % 5 == 0:
                raise RuntimeError(f"release #{self._releases} crashed")  # BUG
            return self._drop(block)


class AsyncCrashPool(SimpleAsyncPool):
    """Every 5th call of async release raises RuntimeError before touching the block."""

    expected = "crash"

    _releases = 0  # a count per pool: the first += gives the instance its own

    async def release(self, block: Block) -> bool:
        self._releases += 1
        if self._releases % 5 == 0:
            raise RuntimeError(f"release #{self._releases} crashed")  # BUG
        return await super().release(block)


PoolClass = type[SimpleThreadedPool] | type[SimpleAsyncPool]

BROKEN_POOLS: list[PoolClass] = [
    NoResetPool,
    PartialResetPool,
    ResetAfterOfferPool,
    AsyncNoResetPool,
    DoubleHandoutPool,
    ReHandoutPool,
    CounterDriftPool,
    DoubleOfferPool,
    NonFreeInQueuePool,
    LeakOnReleasePool,
    AsyncCancelLeakPool,
    RetainFreePool,
    MarkAnyPool,
    RetainNoopPool,
    AcquireRefcountTwoPool,
    DoubleReleaseTruePool,
    DoubleReleaseOfferPool,
    EarlyTimeoutPool,
    MillisecondsPool,
    LateTimeoutPool,
    SpinPool,
    AsyncSpinPool,
    NoNotifyPool,
    AsyncNoNotifyPool,
    DeadlockPool,
    AsyncHangPool,
    CrashPool,
    AsyncCrashPool,
]

CORRECT_POOLS: list[PoolClass] = [SimpleThreadedPool, SimpleAsyncPool]
