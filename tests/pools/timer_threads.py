"""Pools with a timer thread of their own: resets batched by a short ``threading.Timer`` (a
daemon), and a pool that ticks a housekeeping daemon while its acquire spins.

``TimerBatchPool`` is correct: a release parks its block RELEASING on a pending list, and the
first release of a burst arms a 2 ms timer that takes the batch under the lock, zeroes it and
offers it. Its twin takes the batch without the lock, so a release between the swap of the list
and the disarm sees a timer armed, arms none, and its block stays pending for good.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kvstress.mutants import CondvarPool
from kvstress.mutants._block import Block
from kvstress.pool._state import BlockState


class TimerBatchPool(CondvarPool):
    """Resets batched by a daemon ``threading.Timer``; offered a moment after the release."""

    DELAY = 0.002

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: list[Block] = []
        self._armed = False

    def _recycle(self, block: Block) -> None:  # with the lock held
        block.state = BlockState.RELEASING
        self._pending.append(block)
        if not self._armed:
            self._armed = True
            timer = threading.Timer(self.DELAY, self._flush)
            timer.daemon = True
            timer.start()

    def _take_pending(self) -> list[Block]:
        with self._lock:
            return self._swap()

    def _swap(self) -> list[Block]:
        batch = self._pending
        self._pending = []
        self._armed = False
        return batch

    def _flush(self) -> None:
        batch = self._take_pending()
        for block in batch:
            self._reset(block)
        with self._lock:
            for block in batch:
                self._offer(block)


class TimerBatchUnlockedSwapPool(TimerBatchPool):
    """The timer takes the pending list without the lock ("two assignments")."""

    expected = ("lost-block",)

    def _take_pending(self) -> list[Block]:
        return self._swap()  # BUG: a release may append and see the timer armed in between


class SpinBesideTickerPool(CondvarPool):
    """An acquire that spins (``sleep(0)``, no time passes) until a block is free, beside a
    housekeeping daemon that wakes every millisecond: the spin must still be caught."""

    TICK = 0.001

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ticker: threading.Thread | None = None
        self.ticks = 0

    def _tick(self) -> None:
        while True:
            time.sleep(self.TICK)
            self.ticks += 1

    def _until_free(self, timeout: float | None) -> bool:  # with the lock held
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._free:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self._lock.release()
            try:
                time.sleep(0)  # BUG: a spin, not a wait
            finally:
                self._lock.acquire()
        return True
