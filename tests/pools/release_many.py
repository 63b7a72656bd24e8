"""Pools with the optional ``release_many``, for the harness's batch release.

``ReleaseManyPool`` zeroes every block whose last reference goes, then offers them all in one
lock section, and answers one bool per block, as ``release`` would. ``QuietReleaseManyPool``
does the same and answers nothing (the protocol asks no answer of ``release_many``).
``OfferThenZeroManyPool`` offers the batch first and zeroes after, outside the lock: a waiter
woken by the offer takes a block that still holds its last tenant's K/V.
``NotifiesOnceManyPool`` wakes one waiter for the whole batch, as ``release`` does for one block.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.mutants import Block
from tests.pools._condition import ConditionPool


class ReleaseManyPool(ConditionPool):
    """A deque and a Condition; ``release_many`` zeroes, then offers, under the lock."""

    def release(self, block: Block) -> bool:
        return self._release_all([block])[0]

    def release_many(self, blocks: Sequence[Block]) -> list[bool] | None:
        return self._release_all(blocks)

    def _release_all(self, blocks: Sequence[Block]) -> list[bool]:
        with self._changed:
            last = [self._last_reference(block) for block in blocks]
            returned = [block for block, went in zip(blocks, last, strict=True) if went]
            self._give_back(returned)
            self._changed.notify(len(returned))
        return last

    def _give_back(self, blocks: list[Block]) -> None:
        for block in blocks:
            self._reset(block)
        self._free.extend(blocks)


class QuietReleaseManyPool(ReleaseManyPool):
    """``ReleaseManyPool`` whose ``release_many`` answers None."""

    def release_many(self, blocks: Sequence[Block]) -> None:  # type: ignore[override]
        self._release_all(blocks)


class OfferThenZeroManyPool(ReleaseManyPool):
    """Offers the batch, then zeroes it outside the lock (the reset after the offer); its
    ``release`` is right."""

    def release_many(self, blocks: Sequence[Block]) -> list[bool] | None:
        with self._changed:
            last = [self._last_reference(block) for block in blocks]
            returned = [block for block, went in zip(blocks, last, strict=True) if went]
            for block in returned:
                block.state = block.state.FREE  # BUG: offered before it is zeroed
            self._free.extend(returned)
            self._changed.notify(len(returned))
        for block in returned:
            block.data.zero_()
        return last


class DropsSharesManyPool(ReleaseManyPool):
    """``release_many`` frees each block outright, whatever its refcount: a block shared with
    another request goes back to the queue while that request still reads it."""

    def release_many(self, blocks: Sequence[Block]) -> list[bool] | None:
        for block in blocks:
            block.refcount = min(block.refcount, 1)  # BUG: the other references are dropped
        return self._release_all(blocks)


class NotifiesOnceManyPool(ReleaseManyPool):
    """``release_many`` wakes one waiter however many blocks it gives back: a second waiter
    sleeps beside a free block to its deadline (a blind tester's batch pool, missed in 20 s on
    seeds 0-2 with every option: the drawn scenarios seldom park two waiters for one batch)."""

    def _release_all(self, blocks: Sequence[Block]) -> list[bool]:
        with self._changed:
            last = [self._last_reference(block) for block in blocks]
            self._give_back([block for block, went in zip(blocks, last, strict=True) if went])
            self._changed.notify()  # BUG: one wake-up for the whole batch
        return last
