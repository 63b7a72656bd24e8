"""A threaded pool that keeps the last blocks freed on a short hot list (LIFO: their memory is
still in cache) in front of its cold queue, and spills the oldest hot block to the cold queue
when a third one comes back. The twin drops the spilled block: three blocks must be free at once
for it, which a pool of two never has (found only with ``--blocks 3`` or more before the fuzz
tried larger pools itself).
"""

from __future__ import annotations

from typing import Any

from kvstress import BlockState
from tests.pools._simple import Block, SimpleThreadedPool


class HotColdPool(SimpleThreadedPool):
    """Correct: acquire takes the newest hot block, else the oldest cold one."""

    HOT = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hot: list[Block] = []

    def _has_free(self) -> bool:
        return bool(self._hot or self._free)

    def _take(self) -> Block:
        if self._hot:
            self._free.appendleft(self._hot.pop())  # the newest hot block goes first
        return super()._take()

    def _offer(self, block: Block) -> None:
        block.state = BlockState.FREE
        self._hot.append(block)
        if len(self._hot) > self.HOT:
            self._spill(self._hot.pop(0))
        self._count += 1
        self._wake()

    def _spill(self, block: Block) -> None:
        self._free.append(block)

    def free_ids(self) -> list[int]:
        with self._lock:
            return [block.id for block in (*reversed(self._hot), *self._free)]


class HotColdSpillDropPool(HotColdPool):
    """BUG: the block spilled off the hot list never reaches the cold queue."""

    def _spill(self, block: Block) -> None:
        pass
