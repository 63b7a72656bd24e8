"""Mutants of ``PollingCasPool`` (threads): each plants one realistic bug; ``# BUG`` marks it.

``expected`` names the invariant ids a good harness may report for the bug: the one it causes
first, and the ones its consequences show as when a check meets them first.
"""

from __future__ import annotations

import time

from kvstress.mutants._block import HELD, Block
from kvstress.mutants._polling_pool import PollingCasPool
from kvstress.pool._state import BlockState


class CounterRacePool(PollingCasPool):
    """The free counter's update reads the counter before taking the lock that guards the
    write: a concurrent pop or push in between is overwritten, and the counter drifts."""

    expected = ("counter-mismatch",)

    def _add_count(self, delta: int) -> None:
        count = self._count  # BUG: read outside the lock
        with self._count_lock:
            self._count = count + delta


class ReservedCountPool(PollingCasPool):
    """A poll reserves its count before looking at the queue, and an empty poll does not give
    the reservation back: every timed-out acquire leaves the counter one lower."""

    expected = ("counter-mismatch",)

    def _poll(self) -> Block | None:
        self._add_count(-1)  # reserve, so the counter never shows a block about to go
        try:
            block_id = self._free.popleft()
        except IndexError:
            return None  # BUG: the reservation is not returned on the empty path
        return self._claim(self._blocks[block_id])


class ClampedReleasePool(PollingCasPool):
    """Release clamps the refcount at zero instead of refusing a block nobody holds, so a double
    release finds refcount 0 and returns the block to the queue a second time."""

    expected = ("double-release", "queue-corruption")

    def _unpin(self, block: Block) -> bool:
        with self._claims[block.id]:
            block.refcount = max(block.refcount - 1, 0)  # BUG: a clamp, not a "held?" check
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
            return True


class LateZeroTestPool(PollingCasPool):
    """Release decrements under the block's lock but tests for zero after dropping it: two
    sharers releasing together can both read 0, and both return the block. (Its id is then
    queued twice, and the claim of the second copy raises on the corrupt queue.)"""

    expected = ("double-release", "queue-corruption", "crash")

    def _unpin(self, block: Block) -> bool:
        with self._claims[block.id]:
            if block.state not in HELD or block.refcount < 1:
                return False
            block.refcount -= 1
        if block.refcount > 0:  # BUG: read outside the atomic section
            return False
        block.state = BlockState.RELEASING
        return True


class ZeroMeansForeverPool(PollingCasPool):
    """The deadline tests the timeout for truth, so ``timeout=0`` (try once) waits without
    limit: it returns only when a block comes back, if ever."""

    expected = ("timeout-late", "hang")

    def _deadline(self, timeout: float | None) -> float | None:
        return time.monotonic() + timeout if timeout else None  # BUG: 0 is falsy, like None


class ZeroBackoffPool(PollingCasPool):
    """The backoff starts at 0 s, and doubling 0 gives 0: a waiter polls in a tight loop."""

    expected = ("busy-wait",)

    first_backoff = 0.0  # BUG: should be a small positive number of seconds


class UncappedBackoffPool(PollingCasPool):
    """The backoff doubles without its ceiling: a long wait sleeps for ever longer stretches and
    oversleeps a freed block by far more than the declared bound."""

    expected = ("lost-wakeup",)

    def _next_backoff(self, backoff: float) -> float:
        return 2 * backoff  # BUG: min(..., self.max_backoff) was dropped


class RetainFreePool(PollingCasPool):
    """Retain refuses only a block that is being released: one that is FREE (nobody holds it)
    is accepted and its refcount incremented."""

    expected = ("illegal-transition",)

    def retain(self, block: Block) -> None:
        with self._claims[block.id]:
            if block.state is BlockState.RELEASING:  # BUG: should refuse every state but held ones
                raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
            block.refcount += 1


class PollingResetAfterOfferPool(PollingCasPool):
    """Release marks the block FREE and queues its id, and only then zeroes it (the memset kept
    off the queue's path): a poller in between claims the old K/V, or has its own zeroed."""

    expected = ("dirty-read", "shared-block")

    def release(self, block: Block) -> bool:
        if not self._unpin(block):
            return False
        self._cas(block, BlockState.RELEASING, BlockState.FREE)
        self._push(block)
        self._reset(block)  # BUG: the id is already in the queue
        return True


class PollingCheckThenPopPool(PollingCasPool):
    """A poll looks at the queue, and pops only when it saw an id, to skip raising IndexError
    on every empty poll: another poller may take the last id in between (IndexError)."""

    expected = ("crash",)

    def _poll(self) -> Block | None:
        if not self._free:
            return None
        block_id = self._free.popleft()  # BUG: the queue may have been emptied since the check
        self._add_count(-1)
        return self._claim(self._blocks[block_id])


class PollingRetainLostUpdatePool(PollingCasPool):
    """Retain reads the refcount before taking the block's lock and writes ``read + 1`` under
    it: a sharer's release in between is undone (the block is never returned), and another
    retain in between is lost (the block is returned while a sharer still holds it)."""

    expected = ("refcount", "lost-block", "shared-block")

    def retain(self, block: Block) -> None:
        count = block.refcount  # BUG: read outside the compare-and-set
        with self._claims[block.id]:
            if block.state not in HELD or count < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
            block.refcount = count + 1
