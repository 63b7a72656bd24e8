"""The plainest correct threaded pool, for test pools that differ from it in one method: a
deque of blocks and one ``threading.Condition``; a release zeroes, offers and wakes every
waiter, under the Condition's lock."""

from __future__ import annotations

import threading
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._ledger import BlockLedger


class ConditionPool(BlockLedger):
    """A deque and a Condition (see the module)."""

    backoff_bound = 0.0
    threaded = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._changed = threading.Condition()

    def acquire(self, timeout: float | None = None) -> Block | None:
        with self._changed:
            if not self._changed.wait_for(lambda: self._free, timeout):
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        with self._changed:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._changed.notify_all()
            return True
