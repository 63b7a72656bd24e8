"""A polling pool (no condition variable: it sleeps and looks again), correct and with its backoff
left uncapped where no deadline bounds it (a blind user's twin that short waits never showed).

The backoff starts at 50 us and doubles. The correct pool caps each sleep at ``backoff_bound``
(and at the time left); the twin caps it at the time left only, so a wait with no limit sleeps
longer and longer: parked a second, it finds a block freed meanwhile a quarter-second late.
"""

from __future__ import annotations

import time

from tests.pools._simple import Block, SimpleThreadedPool, _check_timeout

FIRST_SLEEP = 5e-5


class PollingForeverPool(SimpleThreadedPool):
    """Correct: take under a lock, or sleep and poll again, each sleep at most ``backoff_bound``."""

    backoff_bound = 0.002

    def acquire(self, timeout: float | None = None) -> Block | None:
        _check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        sleep = FIRST_SLEEP
        while True:
            with self._lock:
                if self._free:
                    return self._take()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(self._next_sleep(sleep, left))
            sleep *= 2

    def _next_sleep(self, sleep: float, left: float | None) -> float:
        capped = min(sleep, self.backoff_bound)
        return capped if left is None else min(capped, left)

    def _wake(self) -> None:
        pass  # the waiters poll


class PollingForeverUncappedPool(PollingForeverPool):
    """The twin: with no deadline, the backoff is never capped (the cap went into the timed branch)."""

    def _next_sleep(self, sleep: float, left: float | None) -> float:
        return sleep if left is None else min(sleep, self.backoff_bound, left)
