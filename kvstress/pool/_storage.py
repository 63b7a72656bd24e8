"""Block memory: one preallocated torch tensor ``[num_blocks, *block_shape]``; blocks are views of it."""

from __future__ import annotations

import torch


class BlockStorage:
    """The pool's memory, allocated once. Nothing here is allocated per request."""

    __slots__ = ("tensor",)

    def __init__(
        self, num_blocks: int, block_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> None:
        self.tensor = torch.zeros((num_blocks, *block_shape), dtype=dtype, device=device)

    def view(self, block_id: int) -> torch.Tensor:
        """A view of exactly one block's memory (made on demand, not kept)."""
        return self.tensor[block_id]

    def reset(self, block_id: int) -> None:
        """Zero one block. Completes before the caller offers the block back to the queue."""
        self.tensor[block_id].zero_()

    def reset_many(self, block_ids: list[int]) -> None:
        """Zero several blocks in one device operation (a slice when the ids are one run, an
        indexed fill otherwise): the per-call cost is paid once, not per block. Completes before
        the caller offers any of them."""
        if not block_ids:
            return
        first, last = min(block_ids), max(block_ids)
        if last - first + 1 == len(block_ids) and len(set(block_ids)) == len(block_ids):
            self.tensor[first : last + 1].zero_()
        else:
            index = torch.tensor(block_ids, dtype=torch.long, device=self.tensor.device)
            self.tensor.index_fill_(0, index, 0)

    @property
    def nbytes(self) -> int:
        """Bytes of block memory in all."""
        return self.tensor.numel() * self.tensor.element_size()
