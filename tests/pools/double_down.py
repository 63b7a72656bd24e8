"""A shared block released before it was marked in use is counted down twice (LMCache PR #2772's
analysis, rebuilt by a blind user): one release frees it under the holder that retained it.

A sequential bug (acquire, share, release) that the state machine finds on its concurrent runs
too, where Hypothesis's shrinking, replaying real threads, left programs of 24-52 steps.
"""

from __future__ import annotations

import threading
from typing import Any

from kvstress import BlockState
from kvstress.mutants import Block
from kvstress.mutants._block import seconds
from kvstress.mutants._ledger import BlockLedger


class UnusedSharedDoubleDownPool(BlockLedger):
    """Free blocks in a deque under a Condition; an unmarked shared block loses two references
    at one release (BUG)."""

    threaded = True
    backoff_bound = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cond = threading.Condition()

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        with self._cond:
            if block.state is BlockState.ACQUIRED and block.refcount > 1:
                block.refcount -= 1  # the "unused key" clean-up, before the release proper
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
            self._cond.notify()
            return True
