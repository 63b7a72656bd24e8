"""Tiered block memory: a core tensor allocated at start, elastic segments allocated on demand.

Block ids ``0 .. core_blocks - 1`` live in the core tensor, for the pool's whole life. Ids from
``core_blocks`` up live in elastic segments of ``grow_blocks`` blocks each (the last one may be
shorter): a segment's tensor is allocated, zeroed, when one of its blocks is first lent, and
dropped once all its blocks have been free for ``idle_shrink_s``. Nothing here locks or reads a
clock: the pool calls every method under its lock and passes the time in.

Invariants, between two calls (the pool's lock held):
- ``_lent[s]`` counts the blocks of segment ``s`` that are lent: ACQUIRED, IN_USE or RELEASING
  (a RELEASING block is being reset, so its memory must stay);
- a segment with ``_lent[s] > 0`` is allocated: ``_segments[s]`` is a tensor;
- ``_idle_since`` holds exactly the allocated segments with nothing lent, each with the time its
  last lent block came back, so shrinking may trust it without looking at ``_lent``;
- allocated elastic blocks never exceed ``num_blocks - core_blocks``: memory is bounded by ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kvstress.pool._storage import BlockStorage


class SegmentedStorage(BlockStorage):
    """The memory of a tiered pool. ``tensor`` is the core tier, ``[core_blocks, *block_shape]``."""

    __slots__ = (
        "_block_shape",
        "_device",
        "_dtype",
        "_idle_since",
        "_lent",
        "_segments",
        "core_blocks",
        "elastic_blocks",
        "grow_blocks",
        "grow_count",
        "num_blocks",
        "peak_elastic_blocks",
        "shrink_count",
    )

    def __init__(
        self,
        num_blocks: int,
        core_blocks: int,
        grow_blocks: int,
        block_shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        # BlockStorage.__init__ would allocate all num_blocks at once: the point of tiers is not to.
        self.tensor = torch.zeros((core_blocks, *block_shape), dtype=dtype, device=device)
        self.num_blocks = num_blocks
        self.core_blocks = core_blocks
        self.grow_blocks = grow_blocks
        self._block_shape = block_shape
        self._dtype = dtype
        self._device = device
        count = -(-(num_blocks - core_blocks) // grow_blocks)
        self._segments: list[torch.Tensor | None] = [None] * count
        self._lent = [0] * count
        self._idle_since: dict[int, float] = {}
        self.elastic_blocks = 0  # blocks in allocated segments, now
        self.peak_elastic_blocks = 0
        self.grow_count = 0
        self.shrink_count = 0

    # -- where a block lives ----------------------------------------------------------------

    def segment_of(self, block_id: int) -> int:
        """The elastic segment holding ``block_id``; -1 for a core block."""
        return -1 if block_id < self.core_blocks else (block_id - self.core_blocks) // self.grow_blocks

    def is_allocated(self, segment: int) -> bool:
        """Whether the segment's memory exists now."""
        return self._segments[segment] is not None

    def lent_in(self, segment: int) -> int:
        """How many of the segment's blocks are lent now."""
        return self._lent[segment]

    def view(self, block_id: int) -> torch.Tensor:
        """A view of exactly one block's memory. Raises RuntimeError for a block whose segment
        has been given back: such a block is not lent, so only a stale handle can ask."""
        if block_id < self.core_blocks:
            return self.tensor[block_id]
        segment = self.segment_of(block_id)
        memory = self._segments[segment]
        if memory is None:
            raise RuntimeError(
                f"block {block_id} lies in elastic segment {segment}, whose memory was given back: "
                "the block is not lent (a stale handle?)"
            )
        return memory[block_id - self.core_blocks - segment * self.grow_blocks]

    def reset(self, block_id: int) -> None:
        """Zero one block; the caller still counts it as lent, so its segment is allocated."""
        self.view(block_id).zero_()

    def reset_many(self, block_ids: Sequence[int]) -> None:
        """Zero each block (they may lie in different tiers and segments)."""
        for block_id in block_ids:
            self.reset(block_id)

    @property
    def nbytes(self) -> int:
        """Bytes of block memory allocated now: the core and the allocated segments."""
        per_block = math.prod(self._block_shape) * self.tensor.element_size()
        return (self.core_blocks + self.elastic_blocks) * per_block

    # -- the elastic tier's life ------------------------------------------------------------

    def lend(self, block_id: int) -> None:
        """``block_id`` is being handed out: allocate its segment (zeroed) if it has no memory.

        Raises what torch raises when the memory cannot be had (then nothing changed).
        """
        segment = self.segment_of(block_id)
        if segment < 0:
            return
        if self._segments[segment] is None:
            size = self._segment_size(segment)
            memory = torch.zeros((size, *self._block_shape), dtype=self._dtype, device=self._device)
            self._segments[segment] = memory
            self.elastic_blocks += size
            self.peak_elastic_blocks = max(self.peak_elastic_blocks, self.elastic_blocks)
            self.grow_count += 1
        self._idle_since.pop(segment, None)  # lent again: no longer idle
        self._lent[segment] += 1

    def give_back(self, block_id: int, now: float) -> None:
        """``block_id`` is FREE again (reset, offered): its segment goes idle with its last block."""
        segment = self.segment_of(block_id)
        if segment < 0:
            return
        self._lent[segment] -= 1
        if self._lent[segment] == 0:
            self._idle_since[segment] = now

    def shrink_idle(self, now: float, idle_s: float) -> int:
        """Give back every segment idle for ``idle_s`` seconds or more; how many were."""
        expired = [s for s, since in self._idle_since.items() if now - since >= idle_s]
        for segment in expired:
            del self._idle_since[segment]
            self._segments[segment] = None
            self.elastic_blocks -= self._segment_size(segment)
            self.shrink_count += 1
        return len(expired)

    def _segment_size(self, segment: int) -> int:
        start = segment * self.grow_blocks
        return min(self.grow_blocks, self.num_blocks - self.core_blocks - start)
