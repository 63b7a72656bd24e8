"""A shared block released before it was marked in use is counted down twice (LMCache PR #2772's
analysis, rebuilt by a blind user): one release frees it under the holder that retained it.

A sequential bug (acquire, share, release) that the state machine finds on its concurrent runs
too, where Hypothesis's shrinking, replaying real threads, left programs of 24-52 steps.
"""

from __future__ import annotations

from kvstress import BlockState
from kvstress.mutants import Block
from kvstress.mutants._ordinary_threads import ThreadConditionPool


class UnusedSharedDoubleDownPool(ThreadConditionPool):
    """The ordinary Condition pool, but an unmarked shared block loses two references at one
    release (BUG: the "unused key" clean-up, then the release proper)."""

    def _last_reference(self, block: Block) -> bool:
        with self._guard:
            if block.state is BlockState.ACQUIRED and block.refcount > 1:
                block.refcount -= 1
        return super()._last_reference(block)
