"""The threaded block pool: one lock, a condition for waiters, the reset done outside the lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kvstress._checks import check_batch_size, check_timeout
from kvstress._errors import PoolExhausted
from kvstress.pool._base import PoolBase
from kvstress.pool._block import Block
from kvstress.pool._core import ReleaseStep

_LAST, _DOUBLE = ReleaseStep.LAST, ReleaseStep.DOUBLE


class ThreadedBlockPool(PoolBase):
    """A KV-cache block pool for threads. Implements the kvstress pool protocol.

    ``acquire`` parks on a condition variable (no spinning) and is woken by each release. The
    reset of a released block happens strictly before the block is offered: under the lock when
    it is a short host copy (a CPU block of up to 64 KiB, a few microseconds), outside it
    otherwise, so a large fill or a device call never holds other threads up. The clock is
    ``time.monotonic``, looked up at call time so that a controlled run can put a virtual clock
    in its place.
    """

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._waiting = 0  # threads parked on _not_empty; a release notifies only when some are
        # What each thread parked in acquire_many waits for (one entry per waiter). They park
        # on their own condition: a single block's notification is never spent on a waiter
        # that cannot use it, and they are all woken whenever the smallest need could be met.
        self._enough = threading.Condition(self._lock)
        self._needs: list[int] = []

    def acquire(self, timeout: float | None = None) -> Block | None:
        """Take a FREE block (ACQUIRED, refcount 1, zeroed); wait up to ``timeout`` seconds.

        ``None`` waits without limit, ``0`` tries once. Returns None when the time is up.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        core, holder = self._core, threading.current_thread()
        with self._lock:
            now = time.monotonic()
            block_id = core.take(now, holder)
            if block_id >= 0:
                core.waits.add(0.0)
                return self._handed_out(block_id, now)
            if timeout == 0:
                core.timeouts += 1
                return None
            self._waiting += 1
            try:
                return self._wait_for_block(now, timeout, holder)
            finally:
                self._waiting -= 1

    def _wait_for_block(self, start: float, timeout: float | None, holder: object) -> Block | None:
        # Called with the lock held. A notification can be lost to a waiter whose wait has
        # just timed out; every waiter therefore looks at the queue after each wake-up,
        # deadline or not, so a block that is free is never left behind.
        core = self._core
        deadline = None if timeout is None else start + timeout
        while True:
            if deadline is None:
                self._not_empty.wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    core.timeouts += 1
                    core.waits.add(time.monotonic() - start)
                    return None
                self._not_empty.wait(remaining)
            now = time.monotonic()
            block_id = core.take(now, holder)
            if block_id >= 0:
                core.waits.add(now - start)
                return self._handed_out(block_id, now)

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        """Take ``n`` FREE blocks at once, in one lock section; wait up to ``timeout`` seconds.

        All or nothing: returns ``n`` blocks (each as ``acquire`` hands one out), or None when
        they do not all come in time, holding nothing. A waiting call holds no block and holds
        no other acquirer back: single acquires take blocks as they free up, and it takes its
        ``n`` only when ``n`` are free at once; whenever that is so it is woken. (It holds
        nothing while it waits, so no two calls can deadlock; a stream of single acquires
        that never leaves ``n`` free can delay it, as it would any batch.)
        """
        n = check_batch_size(n, self.num_blocks)
        if timeout is not None:
            timeout = check_timeout(timeout)
        core, holder = self._core, threading.current_thread()
        with self._lock:
            now = time.monotonic()
            block_ids = core.take_many(n, now, holder)
            if block_ids is not None:
                core.waits.add(0.0)
                return self._handed_out_many(block_ids, now)
            if timeout == 0:
                core.timeouts += 1
                return None
            self._needs.append(n)
            try:
                return self._wait_for_many(n, now, timeout, holder)
            finally:
                self._needs.remove(n)

    def _wait_for_many(
        self, n: int, start: float, timeout: float | None, holder: object
    ) -> list[Block] | None:
        # Called with the lock held. Wake-ups here are broadcasts, never a unit another waiter
        # needs, so giving up passes nothing on.
        core = self._core
        deadline = None if timeout is None else start + timeout
        while True:
            if deadline is None:
                self._enough.wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    core.timeouts += 1
                    core.waits.add(time.monotonic() - start)
                    return None
                self._enough.wait(remaining)
            now = time.monotonic()
            block_ids = core.take_many(n, now, holder)
            if block_ids is not None:
                core.waits.add(now - start)
                if core.free_count:  # single waiters woken for blocks this batch took re-park
                    self._notify(core.free_count)
                return self._handed_out_many(block_ids, now)

    def release(self, block: Block) -> bool:
        """Drop one reference; the last one resets the block and returns it to the queue.

        Returns True only when this call returned the block. A release of a block that is not
        held (double release, or a stale handle) changes nothing, is counted, logged at
        WARNING, and returns False.
        """
        block_id, generation = self._unwrap(block)
        storage = self._storage
        with self._lock:
            step = self._core.begin_release(block_id, generation, time.monotonic())
            if step is _LAST and storage.resets_under_lock:
                storage.reset(block_id)  # a short host copy, strictly before the offer
                self._offer(block_id)
                return True
        if step is _LAST:
            storage.reset(block_id)  # outside the lock, strictly before the offer
            with self._lock:
                self._offer(block_id)
            return True
        if step is _DOUBLE:
            self._log_double_release(block_id)
        return False

    def _offer(self, block_id: int) -> None:
        # Called with the lock held, once the block is reset.
        self._core.finish_release(block_id)
        self._offered((block_id,))
        self._notify()

    def release_many(self, blocks: Sequence[Block]) -> list[bool]:
        """``release`` each block (a sequence's whole table, say), with one reset for all the
        blocks whose last reference goes: one device operation instead of one per block.

        The resets complete before any of these blocks is offered, as in ``release``. Returns,
        per block, what ``release`` would have: True where this call returned it. A block listed
        twice is released twice (the second is a double release unless it was shared).
        """
        block_ids, gens = self._unwrap_many(blocks)  # misuse raises before any change
        storage = self._storage
        with self._lock:
            steps = self._core.begin_release_many(block_ids, gens, time.monotonic())
            count = len(steps)
            if count and steps.count(_LAST) == count and storage.resets_many_under_lock(count):
                storage.reset_many(block_ids)  # a short host fill, strictly before the offers
                self._core.finish_release_many(block_ids)
                self._offered(block_ids)
                self._notify(count)
                return [True] * count
        last = self._returned(block_ids, steps)
        if last:
            self._storage.reset_many(last)  # strictly before the offers below
            with self._lock:
                self._core.finish_release_many(last)
                self._offered(last)
                self._notify(len(last))
        return [True] * len(steps) if last is block_ids else [step is _LAST for step in steps]

    def _notify(self, count: int = 1) -> None:
        if self._waiting:  # no thread parked: nothing to wake, and Condition.notify is not free
            self._not_empty.notify(count)
        if self._needs and self._core.free_count >= min(self._needs):
            self._enough.notify_all()

    @contextmanager
    def block(self, timeout: float | None = None) -> Iterator[Block]:
        """``with pool.block(timeout) as b:`` acquires, and always releases, exceptions included.

        Raises PoolExhausted when no block comes within ``timeout``.
        """
        acquired = self.acquire(timeout)
        if acquired is None:
            raise PoolExhausted(f"no free block within {timeout} s ({self.num_blocks} blocks, all held)")
        try:
            yield acquired
        finally:
            self.release(acquired)

    def _now(self) -> float:
        return time.monotonic()
