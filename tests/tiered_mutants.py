"""Tiered pools for the harness: one correct pool that churns its elastic tier, and planted bugs.

Each broken pool has one bug of the kind a tiered pool invites, and ``expected``: the invariant
ids the harness may name for it (a segment given back under a holder shows as a crash when
the holder reads ``block.data``, or as a lost canary). They churn as hard as the correct one
(``idle_shrink_s=0``: a segment goes back the moment its last block does) so that a bug
shows within a few operations.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kvstress.pool._block import Block
from kvstress.pool._core import ReleaseStep
from kvstress.pool._tiered import TieredBlockPool
from kvstress.pool._tiered_storage import SegmentedStorage


class ChurningTieredPool(TieredBlockPool):
    """Correct: one-block core, two-block segments, shrink at once (the most grow/shrink churn)."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        options.setdefault("core_blocks", 1)
        options.setdefault("grow_blocks", 2)
        options.setdefault("idle_shrink_s", 0.0)
        super().__init__(num_blocks, block_shape, **options)


class TickingTieredPool(ChurningTieredPool):
    """Correct: its clock moves 1 ms per reading, so a segment idles out after a few operations,
    deterministically, whatever the wall clock does (``idle_shrink_s`` 3 ms)."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        options.setdefault("idle_shrink_s", 0.003)
        super().__init__(num_blocks, block_shape, **options)
        self._ticks = 0

    def _now(self) -> float:
        self._ticks += 1
        return self._ticks / 1000


def _swap_storage(pool: TieredBlockPool, storage_class: type[SegmentedStorage]) -> None:
    pool._storage = storage_class(
        pool.num_blocks, pool.core_blocks, pool.grow_blocks, pool.block_shape, pool.dtype, pool.device
    )


class _StaleIdleStorage(SegmentedStorage):
    def lend(self, block_id: int) -> None:
        stamp = self._idle_since.get(self.segment_of(block_id))
        super().lend(block_id)
        if stamp is not None:  # BUG: lending again does not take the segment off the idle list
            self._idle_since[self.segment_of(block_id)] = stamp


class StaleIdleStampPool(TickingTieredPool):
    """A segment lent again keeps its old idle stamp, so it is given back under its holder."""

    expected: ClassVar[tuple[str, ...]] = ("crash", "shared-block")

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        _swap_storage(self, _StaleIdleStorage)


class _IdleOnAnyReturnStorage(SegmentedStorage):
    def give_back(self, block_id: int, now: float) -> None:
        super().give_back(block_id, now)
        segment = self.segment_of(block_id)
        if segment >= 0:  # BUG: idle when any block comes back, not when the last one does
            self._idle_since[segment] = now


class IdleOnAnyReturnPool(ChurningTieredPool):
    """A segment goes idle when any of its blocks returns: given back while others are lent."""

    expected: ClassVar[tuple[str, ...]] = ("crash", "shared-block")

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        super().__init__(num_blocks, block_shape, **options)
        _swap_storage(self, _IdleOnAnyReturnStorage)


class SkipElasticResetPool(TieredBlockPool):
    """Elastic blocks are not reset on release ("segments are fresh zeros"): but only when new."""

    expected: ClassVar[tuple[str, ...]] = ("dirty-read",)

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        options.setdefault("core_blocks", 1)
        options.setdefault("idle_shrink_s", 60.0)  # segments stay, and so does stale data
        super().__init__(num_blocks, block_shape, **options)

    def release(self, block: Block) -> bool:
        """The tiered release, with the reset skipped for elastic blocks."""
        block_id, generation = self._unwrap(block)
        with self._lock:
            step = self._core.begin_release(block_id, generation, self._now())
        if step is not ReleaseStep.LAST:
            return False
        if block_id < self.core_blocks:  # BUG: an elastic block keeps its holder's K/V
            self._storage.reset(block_id)
        with self._lock:
            self._core.finish_release(block_id)
            self._storage.give_back(block_id, self._now())
            self._not_empty.notify()
        return True


class EarlyGiveBackPool(ChurningTieredPool):
    """The block counts as returned to its segment when its last reference drops, before its
    reset: the segment is given back, and the reset writes into memory that is gone."""

    expected: ClassVar[tuple[str, ...]] = ("crash",)

    def release(self, block: Block) -> bool:
        """The tiered release, with the segment's accounting done before the reset."""
        block_id, generation = self._unwrap(block)
        with self._lock:
            step = self._core.begin_release(block_id, generation, self._now())
            if step is ReleaseStep.LAST:  # BUG: the block is RELEASING, still being written
                self._storage.give_back(block_id, self._now())
                self._storage.shrink_idle(self._now(), self.idle_shrink_s)
        if step is not ReleaseStep.LAST:
            return False
        self._storage.reset(block_id)
        with self._lock:
            self._core.finish_release(block_id)
            self._not_empty.notify()
        return True


BROKEN_TIERED = (StaleIdleStampPool, IdleOnAnyReturnPool, SkipElasticResetPool, EarlyGiveBackPool)
