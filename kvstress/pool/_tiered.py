"""The tiered block pools: a core allocated at start (P50), an elastic tier that grows to a hard cap (P99).

The protocol sees ``num_blocks`` ids from the start; the tiers are about memory. The core's
blocks are allocated when the pool is built. Elastic blocks are allocated a segment
(``grow_blocks`` blocks) at a time, when a block of a segment without memory is first handed
out, and a segment is given back once all its blocks have been free for ``idle_shrink_s``
seconds. Shrinking is checked on every acquire that hands out a block and every release that
returns one, on the pool's own clock: no background thread, and a controlled run's virtual
time drives it.

The total lent is bounded structurally: a lent block is an id that is not FREE, and there are
``num_blocks`` ids, so the ids are the semaphore's permits; memory follows the ids, so the
elastic tier can never hold more than ``num_blocks - core_blocks`` blocks, whatever happens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvstress._checks import (
    got,
    non_negative_number,
    positive_int,
)
from kvstress.pool._async import AsyncBlockPool
from kvstress.pool._base import PoolBase
from kvstress.pool._block import Block, BlockBatch
from kvstress.pool._leaks import LeakDetection, LeakTracker
from kvstress.pool._threaded import ThreadedBlockPool
from kvstress.pool._tiered_core import TieredCore
from kvstress.pool._tiered_storage import SegmentedStorage

DEFAULT_IDLE_SHRINK_S = 1.0


class _Tiers(PoolBase):
    """The tiers, for either flavour: construction, where a block's memory comes from and goes
    back to, and the metrics. The flavour (threads or async) adds acquire, release and waiting;
    the hooks here run with its lock held (threads) or on its loop (async)."""

    _storage: SegmentedStorage
    _core: TieredCore

    def __init__(
        self,
        num_blocks: int,
        block_shape: tuple[int, ...] | list[int],
        *,
        core_blocks: int | None = None,
        grow_blocks: int | None = None,
        idle_shrink_s: float = DEFAULT_IDLE_SHRINK_S,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        leak_threshold: float | None = None,
        leak_detection: LeakDetection = LeakDetection.SIMPLE,
        leak_sample_rate: int = 128,
    ) -> None:
        self._tier_options = (core_blocks, grow_blocks)
        self.idle_shrink_s = float(non_negative_number("idle_shrink_s", idle_shrink_s))
        super().__init__(
            num_blocks,
            block_shape,
            dtype=dtype,
            device=device,
            leak_threshold=leak_threshold,
            leak_detection=leak_detection,
            leak_sample_rate=leak_sample_rate,
        )

    def _make_storage(self) -> SegmentedStorage:
        # Only the core is allocated here; segments come with the load (num_blocks is checked).
        self.core_blocks = _core_blocks(self._tier_options[0], self.num_blocks)
        self.grow_blocks = _grow_blocks(self._tier_options[1], self.num_blocks - self.core_blocks)
        return SegmentedStorage(
            self.num_blocks, self.core_blocks, self.grow_blocks, self.block_shape, self.dtype, self.device
        )

    def _make_core(self, tracker: LeakTracker) -> TieredCore:
        return TieredCore(self.num_blocks, self.core_blocks, tracker)

    def _handed_out(self, block_id: int, now: float) -> Block:
        # Right after the core handed the block out: its memory must exist before the holder
        # sees the handle.
        storage = self._storage
        try:
            storage.lend(block_id)
        except BaseException:
            self._put_back(block_id, now)
            raise
        storage.shrink_idle(self._now(), self.idle_shrink_s)
        return super()._handed_out(block_id, now)

    def _handed_out_many(self, block_ids: Sequence[int], now: float) -> BlockBatch:
        # As _handed_out, for a batch: every block's memory exists before any handle is seen,
        # and a segment that cannot be allocated puts the whole batch back (all or nothing).
        storage, lent = self._storage, 0
        try:
            for block_id in block_ids:
                storage.lend(block_id)
                lent += 1
        except BaseException:
            for block_id in block_ids[:lent]:
                storage.give_back(block_id, now)
            for block_id in block_ids:
                self._put_back(block_id, now)
            raise
        storage.shrink_idle(self._now(), self.idle_shrink_s)
        return super()._handed_out_many(block_ids, now)

    def _put_back(self, block_id: int, now: float) -> None:
        # The segment could not be allocated: undo the take, so the block is FREE and queued.
        core = self._core
        core.begin_release(block_id, core.generation(block_id), now)
        core.finish_release(block_id)
        self._notify()

    def _offered(self, block_ids: Sequence[int]) -> None:
        # After the blocks were reset and queued. Until now each was still counted as lent in
        # its segment, so no segment could be given back under a reset.
        now = self._now()
        for block_id in block_ids:
            self._storage.give_back(block_id, now)
        self._storage.shrink_idle(now, self.idle_shrink_s)

    def metrics(self) -> dict[str, float | int]:
        """The pool's metrics, plus the tiers: core size, elastic blocks now and at peak,
        segments grown and shrunk, and the bytes of block memory allocated now."""
        out = super().metrics()
        storage = self._storage
        with self._lock:
            out.update(
                core_blocks=storage.core_blocks,
                elastic_blocks=storage.elastic_blocks,
                elastic_peak_blocks=storage.peak_elastic_blocks,
                elastic_grow_count=storage.grow_count,
                elastic_shrink_count=storage.shrink_count,
                memory_bytes=storage.nbytes,
            )
        return out

    @property
    def storage(self) -> torch.Tensor:
        """The core tier's memory, ``[core_blocks, *block_shape]`` (elastic segments come and go)."""
        return self._storage.tensor


class TieredBlockPool(_Tiers, ThreadedBlockPool):
    """A KV-cache block pool for threads whose memory follows the load. Implements the protocol.

    ``num_blocks`` is the hard maximum (size it for P99 concurrency); ``core_blocks`` (default
    half, at least 1) are allocated at start (P50). ``grow_blocks`` (default: a quarter of the
    elastic tier, at least 1) is the elastic segment size, ``idle_shrink_s`` (>= 0) how long a
    whole segment must sit free before its memory is given back. Acquire, release, waiting,
    refcounts, tenancies, leak detection and metrics are the threaded pool's; the free queue
    hands out core blocks first (FIFO), then the lowest free elastic block, so the elastic tier
    grows only when the core is exhausted. An elastic block is fresh zeros when its segment is
    allocated and is reset on release like any other, strictly before it is offered.

    An acquire that cannot allocate a new segment (out of memory) puts the block back and
    raises what torch raised. ``storage`` is the core tier ``[core_blocks, *block_shape]``.
    """


class AsyncTieredBlockPool(_Tiers, AsyncBlockPool):
    """``TieredBlockPool`` for async tasks (asyncio or trio, through anyio): the same tiers and
    arguments, with the async pool's acquire, release, waiting, cancellation and clock (so a
    virtual clock drives the shrink). Implements the protocol (async flavour).
    """


def _core_blocks(core_blocks: object, num_blocks: int) -> int:
    if core_blocks is None:
        return max(1, num_blocks // 2)
    if (
        isinstance(core_blocks, bool)
        or not isinstance(core_blocks, int)
        or not 1 <= core_blocks <= num_blocks
    ):
        raise ValueError(
            f"core_blocks must be None or an int in 1..num_blocks ({num_blocks}), got {got(core_blocks)}"
        )
    return core_blocks


def _grow_blocks(grow_blocks: object, elastic: int) -> int:
    if grow_blocks is None:
        return max(1, -(-elastic // 4))
    return positive_int("grow_blocks", grow_blocks)
