"""Writing K/V, the same for both paths: how a request's tokens fill blocks, and the write itself."""

from __future__ import annotations

import torch

# ModelCard.block_shape is (2, layers, block_tokens, kv_heads, head_dim): tokens are axis 2.
TOKEN_AXIS = 2


def block_fills(tokens: int, block_tokens: int) -> list[int]:
    """The tokens written into each block, in order: full blocks, then the remainder (if any)."""
    full, rest = divmod(tokens, block_tokens)
    return [block_tokens] * full + ([rest] if rest else [])


def write_tokens(block: torch.Tensor, tokens: int, value: float) -> None:
    """Write K and V of the first ``tokens`` token slots of one block (every layer and head)."""
    block.narrow(TOKEN_AXIS, 0, tokens).fill_(value)


def kv_value(index: int) -> float:
    """The value request ``index`` writes: never zero, so a block left unzeroed would show."""
    return float(index % 7 + 1)
