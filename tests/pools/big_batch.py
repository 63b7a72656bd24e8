"""A batch of more than half the pool, served a way of its own: it would starve behind single
acquirers if it waited for all its blocks to be free at once, so it gathers them as they come
back, holding what it has, one such batch at a time (two could each hold half, for ever).
``GatheringBatchPool`` puts what it gathered back and wakes every waiter when it gives up:
correct. ``GatheringForgetsWakePool`` (BUG) puts them back without a wake-up: a waiter parked
meanwhile sleeps beside free blocks. Every search drew batches of three blocks at most, so on
every pool size the run tries the big-batch path never ran (a blind tester's)."""

from __future__ import annotations

import time

from kvstress import BlockState
from kvstress.mutants import Block, CondvarBatchPool
from kvstress.mutants._batch_pools import batch_size
from kvstress.mutants._block import seconds


class GatheringBatchPool(CondvarBatchPool):
    """``CondvarBatchPool`` whose batches of more than half the pool gather (see above)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._gathering = False

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Block] | None:
        n, limit = batch_size(n, self.num_blocks), seconds(timeout)
        if n <= max(2, self.num_blocks // 2):
            return super().acquire_many(n, limit)
        deadline = None if limit is None else time.monotonic() + limit
        with self._lock:
            while self._gathering:  # one gatherer at a time
                if not self._wait_until(deadline):
                    return None
            self._gathering = True
            got: list[Block] = []
            while True:
                while self._free and len(got) < n:
                    got.append(self._take())
                if len(got) >= n:
                    self._gathering = False
                    self._not_empty.notify_all()  # the next gatherer may go
                    return got
                if not self._wait_until(deadline):
                    self._gathering = False
                    self._give_back(got)
                    return None

    def _wait_until(self, deadline: float | None) -> bool:
        """Under the lock: wait for a wake-up; False once ``deadline`` has passed."""
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        self._wait(remaining)
        return True

    def _give_back(self, got: list[Block]) -> None:
        """Under the lock: the gathered blocks (zeroed as they came back) are free again, and
        every waiter (a single acquirer, the next gatherer) is woken."""
        for block in got:
            block.state, block.refcount = BlockState.FREE, 0
            self._free.append(block)
            self._count += 1
        self._not_empty.notify_all()


class GatheringForgetsWakePool(GatheringBatchPool):
    """BUG: the gathered blocks go back without a wake-up (nor the next gatherer's)."""

    def _give_back(self, got: list[Block]) -> None:
        for block in got:
            block.state, block.refcount = BlockState.FREE, 0
            self._free.append(block)
            self._count += 1
