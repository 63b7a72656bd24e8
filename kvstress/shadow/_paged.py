"""The paged KV cache: one sequence's K/V in pool blocks, and the search for the block that lied.

Position ``p`` lives in ``blocks[p // block_tokens]``, slot ``p % block_tokens``: its K at
``data[0, layer, slot]``, its V at ``data[1, layer, slot]`` (the card's block shape
``(2, layers, block_tokens, kv_heads, head_dim)``). Attention gathers whole blocks, as paged
kernels do, and the decoder masks the slots past the length.

Beside the blocks the cache keeps ``written``, a private copy of every K/V it stored, and the
K/V each layer gathered in the last step. A pool must never touch memory a tenant holds, so
any difference between the two, even one bit, is the pool's doing: ``first_corruption`` names
the first such position and its block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kvstress.capacity import ModelCard

_KINDS = ("K", "V")


@dataclass(frozen=True)
class Corruption:
    """The first position whose K/V read back differs from what was written, and its block."""

    position: int
    layer: int
    kind: str  # "K" or "V"
    block_index: int  # in the sequence's block table
    slot: int
    max_abs_diff: float  # between what was written and what was read, over that position's row
    block: Any  # the pool's block handle


class PagedCache:
    """K/V of one sequence in pool blocks (see the module docstring).

    Invariant: ``blocks[i]`` holds positions ``i * block_tokens .. (i + 1) * block_tokens - 1``;
    the table only grows (a block is appended when the first position past the table is
    written), and ``written`` holds every K/V stored so far, bit for bit.
    """

    def __init__(
        self,
        card: ModelCard,
        block_tokens: int,
        capacity: int,
        *,
        blocks: Sequence[Any] = (),
        written: torch.Tensor | None = None,
    ) -> None:
        self.block_tokens = block_tokens
        self.blocks: list[Any] = list(blocks)
        shape = (2, card.layers, capacity, card.kv_heads, card.head_dim)
        self.written = written if written is not None else torch.zeros(shape, dtype=torch.float32)
        self._last_read: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}

    def needs_block(self, position: int) -> bool:
        """Whether writing ``position`` needs one more block in the table."""
        return position // self.block_tokens >= len(self.blocks)

    def write(self, layer: int, position: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store K and V in the block slot of ``position`` and in the private record."""
        block = self.blocks[position // self.block_tokens]
        slot = position % self.block_tokens
        block.data[0, layer, slot] = key
        block.data[1, layer, slot] = value
        self.written[0, layer, position] = block.data[0, layer, slot]  # as stored (dtype included)
        self.written[1, layer, position] = block.data[1, layer, slot]

    def read(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Whole blocks covering ``length`` positions, gathered (a copy), padding included."""
        used = self.blocks[: -(-length // self.block_tokens)]
        keys = torch.cat([block.data[0, layer] for block in used]).to(torch.float32)
        values = torch.cat([block.data[1, layer] for block in used]).to(torch.float32)
        self._last_read[layer] = (keys, values, length)
        return keys, values

    def first_corruption(self) -> Corruption | None:
        """The lowest position whose K or V, as gathered in the last step, differs from what was
        written there (layer 0 first, K before V); None when every read matched."""
        found: Corruption | None = None
        for layer, (keys, values, length) in sorted(self._last_read.items()):
            for kind, (read, kv) in enumerate(((keys, 0), (values, 1))):
                rows = (read[:length] != self.written[kv, layer, :length]).flatten(1).any(dim=1)
                bad = torch.nonzero(rows)
                if bad.numel() == 0:
                    continue
                position = int(bad[0])
                if found is None or position < found.position:
                    diff = (read[position] - self.written[kv, layer, position]).abs().max()
                    found = Corruption(
                        position=position,
                        layer=layer,
                        kind=_KINDS[kind],
                        block_index=position // self.block_tokens,
                        slot=position % self.block_tokens,
                        max_abs_diff=float(diff),
                        block=self.blocks[position // self.block_tokens],
                    )
        return found
