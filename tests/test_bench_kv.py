"""Writing K/V: how tokens fill blocks, and that a write touches exactly the token slots asked for."""

from __future__ import annotations

import torch

from kvstress.bench._kv import TOKEN_AXIS, block_fills, kv_value, write_tokens
from kvstress.capacity import load_card


def test_tokens_fill_whole_blocks_then_the_remainder() -> None:
    """40 tokens in 16-token blocks are 16, 16, 8; 32 are two full blocks; 0 are none."""
    assert block_fills(40, 16) == [16, 16, 8]
    assert block_fills(32, 16) == [16, 16]
    assert block_fills(0, 16) == []


def test_a_write_fills_the_first_token_slots_of_every_layer_and_head() -> None:
    """Writing 5 tokens sets slots 0..4 of K and V in every layer and head, and nothing else."""
    block = torch.zeros(load_card("tiny").block_shape(16))
    write_tokens(block, 5, kv_value(0))
    written = block.narrow(TOKEN_AXIS, 0, 5)
    assert bool((written == 1.0).all()) and int(block.count_nonzero()) == written.numel()


def test_every_request_writes_a_value_that_is_not_zero() -> None:
    """kv_value is never 0, so a block left unzeroed would show."""
    assert all(kv_value(index) != 0 for index in range(50))
