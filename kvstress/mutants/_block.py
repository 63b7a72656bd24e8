"""The block every corpus pool hands out, and the constructor arguments they all accept.

Nothing here waits or locks: the pools' own modules hold every primitive, so a controlled run
(which swaps ``threading`` and ``time`` in the modules of the pool's class hierarchy) reaches
all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvstress._checks import check_block_shape, check_num_blocks, check_timeout
from kvstress.pool._state import HELD_STATES, BlockState

HELD = HELD_STATES  # ACQUIRED or IN_USE: somebody has a reference


class Block:
    """One block for the pool's whole life: ``id``, ``data`` (a view of exactly its memory),
    ``state`` and ``refcount``.

    Every tenant gets this same object, so a handle kept past its release reads the live state.
    The fields change only under the owning pool's exclusion, whatever form that takes.
    """

    __slots__ = ("data", "id", "refcount", "state")

    def __init__(self, block_id: int, data: torch.Tensor) -> None:
        self.id = block_id
        self.data = data
        self.state = BlockState.FREE
        self.refcount = 0

    def __repr__(self) -> str:
        return f"<Block {self.id} {self.state.name} refcount={self.refcount}>"


def allocate(
    num_blocks: int,
    block_shape: Sequence[int] | int,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> list[Block]:
    """``num_blocks`` FREE blocks over one zeroed tensor; ValueError names a bad argument."""
    count, shape = check_num_blocks(num_blocks), check_block_shape(block_shape)
    memory = torch.zeros((count, *shape), dtype=dtype, device=device)
    return [Block(i, memory[i]) for i in range(count)]


def seconds(timeout: float | None) -> float | None:
    """The timeout as float seconds (None: no limit); ValueError for a negative or NaN one."""
    return check_timeout(timeout)
