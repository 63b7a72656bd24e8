"""The block type, with a lock of its own that guards its state and refcount."""

from __future__ import annotations

import threading

import torch

from kvstress import BlockState


class LockedBlock:
    """One block for the pool's whole life; ``lock`` guards ``state`` and ``refcount``."""

    def __init__(self, block_id: int, data: torch.Tensor) -> None:
        self.id = block_id
        self.data = data
        self.state = BlockState.FREE
        self.refcount = 0
        self.lock = threading.Lock()


def make_blocks(
    num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: object
) -> list[LockedBlock]:
    memory = torch.zeros((num_blocks, *block_shape), dtype=dtype, device=device)  # type: ignore[arg-type]
    return [LockedBlock(i, memory[i]) for i in range(num_blocks)]
