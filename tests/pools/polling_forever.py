"""A polling pool (no condition variable: it sleeps and looks again), correct and with its backoff
left uncapped where no deadline bounds it (a blind user's twin that short waits never showed).

The backoff starts at 50 us and doubles. The correct pool caps each sleep at ``backoff_bound``
(and at the time left); the twin caps it at the time left only, so a wait with no limit sleeps
longer and longer: parked a second, it finds a block freed meanwhile a quarter-second late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import torch

from tests.pools._simple import Block, _check_timeout, _FreeList

FIRST_SLEEP = 5e-5


class PollingForeverPool(_FreeList):
    """Correct: take under a lock, or sleep and poll again, each sleep at most ``backoff_bound``."""

    backoff_bound = 0.002

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_blocks, block_shape, dtype=dtype, device=device)
        self._lock = threading.Lock()

    def _exclusive(self) -> threading.Lock:
        return self._lock

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

    def release(self, block: Block) -> bool:
        with self._lock:
            return self._drop(block)

    def _wake(self) -> None:
        pass  # the waiters poll


class PollingForeverUncappedPool(PollingForeverPool):
    """The twin: with no deadline, the backoff is never capped (the cap went into the timed branch)."""

    def _next_sleep(self, sleep: float, left: float | None) -> float:
        return sleep if left is None else min(sleep, self.backoff_bound, left)
