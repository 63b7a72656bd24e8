"""The block bookkeeping every pool of the ordinary-way corpus shares, whatever it waits on.

A developer building a pool on one standard primitive writes this part the same way each time:
states and refcounts on the blocks, a reset before the offer. What differs between the pools
(how a free block is found, how a waiter waits) lives in each pool's own module. The guard is a
``threading.Lock`` for threaded pools (refcounts change from many threads) and nothing for async
ones (no await between a check and its change).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

from kvstress.mutants._block import HELD, Block, allocate
from kvstress.pool._state import BlockState


class BlockLedger:
    """Blocks over one zeroed tensor, and the protocol's transitions on them.

    ``_guard`` serialises every change to a block's state and refcount. ``_free`` is a deque of
    the free blocks, head first, for the pools that keep them so (``free_count`` and
    ``free_ids`` read it); a pool whose primitive holds them instead overrides both. Subclasses
    call ``_taken`` on a block they took, and ``_last_reference`` then ``_reset`` before they
    offer one back.
    """

    threaded = False

    def __init__(
        self,
        num_blocks: int,
        block_shape: Sequence[int] | int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self._blocks = allocate(num_blocks, block_shape, dtype, device)
        self.num_blocks = len(self._blocks)
        self._guard: Any = threading.Lock() if self.threaded else contextlib.nullcontext()
        self._free: deque[Block] = deque(self._blocks)

    def free_count(self) -> int:
        """Blocks in the free deque."""
        return len(self._free)

    def free_ids(self) -> list[int]:
        """The free deque's ids, head first (a snapshot)."""
        return [block.id for block in list(self._free)]

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE; ValueError from any other state."""
        with self._guard:
            if block.state is not BlockState.ACQUIRED:
                raise ValueError(f"mark_in_use needs ACQUIRED, got block {block.id} {block.state.name}")
            block.state = BlockState.IN_USE

    def retain(self, block: Block) -> None:
        """One more reference to a held block; ValueError for a block nobody holds."""
        with self._guard:
            if block.state not in HELD or block.refcount < 1:
                raise ValueError(f"retain needs a held block, got block {block.id} {block.state.name}")
            block.refcount += 1

    def _taken(self, block: Block) -> Block:
        """``block``, just taken from the free structure: ACQUIRED with one reference."""
        with self._guard:
            block.state = BlockState.ACQUIRED
            block.refcount = 1
        return block

    def _last_reference(self, block: Block) -> bool:
        """One reference less; True when it was the last (the block is now RELEASING). A block
        nobody holds (a double release) is left as it is: False."""
        with self._guard:
            if block.state not in HELD or block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount > 0:
                return False
            block.state = BlockState.RELEASING
            return True

    def _reset(self, block: Block) -> None:
        """Zero the block and mark it FREE: strictly before it is offered again."""
        block.data.zero_()
        block.state = BlockState.FREE
