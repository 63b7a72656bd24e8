"""A bitmap allocator in the style of GPU heap allocators: an acquire first reserves a unit of a
fill counter (waiting while the pool is full), then scans the bitmap for a free bit, starting
after the last bit claimed (next fit), and claims it by compare-and-set.

A scan can miss with a unit reserved: the bit it passed was taken as it looked, and the bit it
comes back to was freed behind it. ``NextFitKeepsReservationPool`` then scans again keeping the
unit (mallocMC PR #61: the counter raised for a search that came back empty was not lowered):
the counter says one block fewer is free than the bitmap, for good. It takes a take paused
across another worker's whole tenancy and its next take: four or five preemptions.
``NextFitPool`` gives the unit back before it tries again."""

from __future__ import annotations

import threading
import time
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._ledger import BlockLedger


class NextFitPool(BlockLedger):
    """A fill counter under a Condition, a bitmap claimed bit by bit (see the module)."""

    backoff_bound = 0.0
    threaded = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fill = threading.Condition()
        self._reserved = 0
        self._bits = threading.Lock()  # stands for the word's compare-and-set
        self._used = [False] * self.num_blocks
        self._hint = 0

    def _claim(self, index: int) -> bool:
        with self._bits:
            if self._used[index]:
                return False
            self._used[index] = True
            self._hint = (index + 1) % self.num_blocks
            return True

    def _scan(self) -> Block | None:
        start = self._hint
        for step in range(self.num_blocks):
            index = (start + step) % self.num_blocks
            if not self._used[index] and self._claim(index):
                return self._taken(self._blocks[index])
        return None

    def _missed(self) -> None:
        with self._fill:
            self._reserved -= 1
            self._fill.notify_all()

    def acquire(self, timeout: float | None = None) -> Block | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._fill:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._fill.wait_for(lambda: self._reserved < self.num_blocks, left):
                    return None
                self._reserved += 1
            block = self._scan()
            if block is not None:
                return block
            self._missed()

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        with self._bits:
            self._used[block.id] = False
        with self._fill:
            self._reserved -= 1
            self._fill.notify_all()
        return True

    def free_count(self) -> int:
        with self._fill:
            return self.num_blocks - self._reserved

    def free_ids(self) -> list[int]:
        with self._bits:
            return [index for index, used in enumerate(self._used) if not used]


class NextFitKeepsReservationPool(NextFitPool):
    """Scans again keeping the unit it reserved (see the module)."""

    def _missed(self) -> None:
        pass  # BUG: the unit stays reserved
