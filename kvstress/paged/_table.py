"""A sequence's block table: its logical-to-physical block map, the tokens it holds, its K/V."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from kvstress.paged._hash import ROOT_HASH
from kvstress.paged._protocol import BlockHandle

if TYPE_CHECKING:
    from kvstress.paged._manager import BlockManager


class BlockTable:
    """One sequence's blocks, in logical order; built by ``BlockManager.allocate`` or ``fork``.

    Block tables are append-only except for truncation (a policy the manager applies and
    counts) and copy-on-write (which swaps the last block for a private copy). Invariants,
    under ``lock``, between two operations:
    - every block but the last is full: ``num_tokens == (len(blocks) - 1) * block_tokens + fill``
      with ``0 < fill <= block_tokens`` (no blocks when there are no tokens);
    - ``cached[i]`` says the table's reference to ``blocks[i]`` is counted by the prefix cache
      (one of its users); every block the table references is one pool reference it owns;
    - a block another table (or the cache) also references is never written: the manager
      copies it first.
    The methods delegate to the manager; the table is safe to use from several threads.
    """

    def __init__(self, manager: BlockManager, seq_id: int) -> None:
        self.manager = manager
        self.seq_id = seq_id
        self.lock = threading.RLock()
        self.blocks: list[BlockHandle] = []
        self.cached: list[bool] = []
        self.tokens: list[int] = []
        self.last_hash = ROOT_HASH  # the chained hash of the last full block
        self.chain_intact = True  # False after truncation: positions no longer match a prefix
        self.truncated_tokens = 0
        self.freed = False

    @property
    def num_tokens(self) -> int:
        """How many tokens the table holds now (after any truncation)."""
        return len(self.tokens)

    def append_token(self, token: int, kv: torch.Tensor) -> None:
        """Append one token and its K/V, shape ``(2, layers, kv_heads, head_dim)``.

        Takes a new block only when the last one is full. Raises kvstress.PoolExhausted when
        the policy gives up (the table is then unchanged, unless truncation was counted).
        """
        self.manager.append(self, token, kv)

    def fork(self) -> BlockTable:
        """A child sharing every block (refcount + 1 each, nothing copied)."""
        return self.manager.fork(self)

    def free(self) -> None:
        """Release every block; the table cannot be used afterwards."""
        self.manager.free(self)

    def kv(self) -> torch.Tensor:
        """The sequence's K/V gathered from its blocks: ``(2, layers, num_tokens, kv_heads, head_dim)``."""
        return self.manager.kv(self)

    def block_ids(self) -> list[int]:
        """The physical block ids, in logical order (a snapshot)."""
        with self.lock:
            return [block.id for block in self.blocks]

    def token_ids(self) -> list[int]:
        """The token ids the table holds, in order (a snapshot)."""
        with self.lock:
            return list(self.tokens)

    def fill(self) -> int:
        """Tokens in the last block (0 when there is none); call with ``lock`` held."""
        if not self.blocks:
            return 0
        return self.num_tokens - (len(self.blocks) - 1) * self.manager.block_tokens

    def gather(self) -> torch.Tensor:
        """The K/V of the held tokens; call with ``lock`` held."""
        parts: list[torch.Tensor] = []
        size = self.manager.block_tokens
        for index, block in enumerate(self.blocks):
            count = self.fill() if index == len(self.blocks) - 1 else size
            parts.append(block.data[:, :, :count])
        if not parts:
            layers, heads, dim = self.manager.token_shape[1:]
            return torch.zeros((2, layers, 0, heads, dim), dtype=self.manager.dtype)
        return torch.cat(parts, dim=2)

    def snapshot(self) -> Sequence[tuple[int, bool]]:
        """(block id, through the cache) for every block, in order."""
        with self.lock:
            return [(b.id, c) for b, c in zip(self.blocks, self.cached, strict=True)]

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"{self.num_tokens} tokens in {len(self.blocks)} blocks"
        return f"<BlockTable {self.seq_id}: {state}>"
