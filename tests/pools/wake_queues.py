"""A threaded pool whose sleepers are spread over two wait queues, in the manner of Linux's
sbitmap (blk-mq's tag allocator): a waiter joins the queues round-robin, each queue has a lock
of its own, a release wakes one sleeper.

``WakeQueuesPool`` is correct: a release looks for a sleeper queue by queue, and takes it off
the queue it finds it on under that queue's lock, the look and the wake in one section.
``WakeQueuesCheckedApartPool`` (BUG) picks the first queue with a sleeper under its lock, then
wakes that queue under the lock again: a sleeper whose deadline lands in between leaves the
queue, the wake-up goes to nobody, and a sleeper on the other queue sleeps on beside the block
(sbitmap before Linux 26edb30dd1c0, "Try each queue to wake up at least one waiter").
"""

from __future__ import annotations

import threading
import time

from kvstress.mutants import Block, ThreadConditionPool
from kvstress.mutants._block import seconds

QUEUES = 2


class _Sleeper:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.woken = False


class _WaitQueue:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sleepers: list[_Sleeper] = []


class WakeQueuesPool(ThreadConditionPool):
    """ThreadConditionPool's deque and its Condition, taken as the deque's lock (its free_count
    and free_ids read under it); sleepers on ``QUEUES`` wait queues of their own, round-robin."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._queues = [_WaitQueue() for _ in range(QUEUES)]
        self._wait_index = 0
        self._wake_index = 0

    def _try_take(self) -> Block | None:
        with self._cond:
            block = self._free.popleft() if self._free else None
        return None if block is None else self._taken(block)

    def _join(self, sleeper: _Sleeper) -> _WaitQueue:
        with self._cond:
            queue = self._queues[self._wait_index]
            self._wait_index = (self._wait_index + 1) % QUEUES
        with queue.lock:
            queue.sleepers.append(sleeper)
        return queue

    @staticmethod
    def _leave(queue: _WaitQueue, sleeper: _Sleeper) -> bool:
        """Off the queue if still on it; whether a release woke it."""
        with queue.lock:
            if sleeper in queue.sleepers:
                queue.sleepers.remove(sleeper)
            return sleeper.woken

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            block = self._try_take()
            if block is not None:
                return block
            if deadline is not None and time.monotonic() >= deadline:
                return None
            sleeper = _Sleeper()
            queue = self._join(sleeper)
            block = self._try_take()  # a release between the look and the join woke nobody
            if block is not None:
                if self._leave(queue, sleeper):
                    self._wake()  # a wake-up this waiter does not need: pass it on
                return block
            left = None if deadline is None else deadline - time.monotonic()
            if left is None or left > 0:
                sleeper.event.wait(left)
            if not self._leave(queue, sleeper) and deadline is not None and time.monotonic() >= deadline:
                return None  # timed out, never woken: no wake-up to pass on

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue, and wake one sleeper."""
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._cond:
            self._free.append(block)
        self._wake()
        return True

    def _wake(self) -> None:
        for step in range(QUEUES):
            index = (self._wake_index + step) % QUEUES
            queue = self._queues[index]
            with queue.lock:
                if queue.sleepers:
                    self._wake_index = (index + 1) % QUEUES
                    self._wake_one(queue)
                    return

    @staticmethod
    def _wake_one(queue: _WaitQueue) -> None:
        """Under ``queue.lock``: the first sleeper off the queue, woken."""
        sleeper = queue.sleepers.pop(0)
        sleeper.woken = True
        sleeper.event.set()


class WakeQueuesCheckedApartPool(WakeQueuesPool):
    """BUG: the queue to wake is chosen under its lock and woken under it again."""

    def _wake(self) -> None:
        chosen = None
        for step in range(QUEUES):
            index = (self._wake_index + step) % QUEUES
            queue = self._queues[index]
            with queue.lock:
                active = bool(queue.sleepers)
            if active:
                chosen = index
                break
        if chosen is None:
            return
        self._wake_index = (chosen + 1) % QUEUES
        queue = self._queues[chosen]
        with queue.lock:  # BUG: its sleeper may have left since the look
            if queue.sleepers:
                self._wake_one(queue)
