"""A threaded pool that wakes only as many waiters as can take a block, in the manner of .NET's
``SemaphoreSlim`` after its 2017 rework: ``release`` counts the wake-ups it sends
(``_pulsed``) and sends none for a waiter already counted as woken; a woken waiter takes its
wake-up back off the count.

``PulseCountPool`` is correct: every waiter that wakes, by a notify or by its deadline, takes a
wake-up off the count if one is counted (a waiter whose wait timed out may still have been
notified: ``threading.Condition`` picks it while it waits to take the lock back).
``PulseCountSuccessOnlyPool`` (BUG) takes it back only after a wait that was notified: a
waiter whose deadline lands as a release notifies it returns with the wake-up still counted,
and from then on the count is one too high, so the next release with one waiter parked wakes
nobody.
"""

from __future__ import annotations

import time
from typing import Any

from kvstress.mutants import Block, ThreadConditionPool
from kvstress.mutants._block import seconds


class PulseCountPool(ThreadConditionPool):
    """ThreadConditionPool's deque and Condition; releases notify only uncounted waiters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting = 0
        self._pulsed = 0  # wake-ups sent and not yet taken back by a waiter

    def _woke(self, notified: bool) -> bool:
        if self._pulsed:
            self._pulsed -= 1
        return notified

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A free block, or None after ``timeout`` seconds (0: try once)."""
        timeout = seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if not self._free and timeout != 0:
                self._waiting += 1
                try:
                    while not self._free:
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            break
                        if not self._woke(self._cond.wait(left)):
                            break
                finally:
                    self._waiting -= 1
            if not self._free:
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        """One reference less; at the last, reset, queue, and wake a waiter not counted yet."""
        with self._cond:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            if min(len(self._free), self._waiting) - self._pulsed > 0:
                self._pulsed += 1
                self._cond.notify()
            return True


class PulseCountSuccessOnlyPool(PulseCountPool):
    """BUG: a wait that timed out keeps the wake-up it may have taken on the count."""

    def _woke(self, notified: bool) -> bool:
        if notified and self._pulsed:
            self._pulsed -= 1
        return notified
