"""A correct threaded pool on a lock-free stack: a Treiber free list with a stamped head.

The design of ``PollingCasPool`` (a CAS per block, a counter beside the list, polling with
capped backoff), with the free list a stack linked through the blocks: ``_top`` is the head's
block id and a stamp, and every push or pop swaps it in one compare-and-set that compares both,
as Java's ``AtomicStampedReference`` does. Comparing the id alone lets a pop whose read went
stale (the head popped, popped below, and pushed back) install a link to a block that is held
(ABA; see ``TreiberPointerCasPool``).
"""

from __future__ import annotations

import threading
from typing import Any

from kvstress.mutants._block import Block
from kvstress.mutants._polling_pool import PollingCasPool

NIL = -1  # the link of the stack's bottom, and the empty stack's head


class TreiberPool(PollingCasPool):
    """Threads. ``_top`` is ``(head id, stamp)``; ``_below[i]`` is the id under block ``i``.
    Python has no CAS instruction: ``_head_lock`` makes the compare and the swap one step, and
    is held for nothing else, so the pops and pushes stay optimistic (read, compute, retry).

    Invariants: a block is linked in only after its reset and its FREE (``release``); every
    successful swap bumps the stamp, so a swap computed from a stale read fails; ``_count``
    follows each swap, under its own lock, so it equals the stack's length at quiet points.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_lock = threading.Lock()
        self._below = [i + 1 if i + 1 < self.num_blocks else NIL for i in range(self.num_blocks)]
        self._top = (0 if self.num_blocks else NIL, 0)
        self._free.clear()  # the stack replaces the deque

    def free_ids(self) -> list[int]:
        """The stack's ids, top first (a snapshot: a walk that stops at the bottom, or after one
        id more than the pool has, so a corrupt link cannot make it loop)."""
        ids: list[int] = []
        at = self._top[0]
        while at != NIL and len(ids) <= self.num_blocks:
            ids.append(at)
            at = self._below[at]
        return ids

    def _poll(self) -> Block | None:
        while True:
            top = self._top
            if top[0] == NIL:
                return None
            below = self._below[top[0]]
            if self._cas_top(top, below):
                self._add_count(-1)
                return self._claim(self._blocks[top[0]])

    def _push(self, block: Block) -> None:
        while True:
            top = self._top
            self._below[block.id] = top[0]
            if self._cas_top(top, block.id):
                self._add_count(+1)
                return

    def _cas_top(self, seen: tuple[int, int], head: int) -> bool:
        """Swap the head to ``head`` if it is still ``seen``, id and stamp."""
        with self._head_lock:
            if self._top != seen:
                return False
            self._top = (head, seen[1] + 1)
            return True
