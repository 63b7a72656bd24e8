"""BlockTable and BlockManager: the write path, reads, fork with copy-on-write, freeing, bad input."""

from __future__ import annotations

import pytest
import torch

import kvstress
from kvstress.paged import BlockManager, PagingPolicy
from kvstress.paged._machine import prompt_kv, token_kv

CARD = kvstress.load_card("tiny")
SHAPE = CARD.block_shape(2)
TOKEN_SHAPE = (2, CARD.layers, CARD.kv_heads, CARD.head_dim)


def manager(num_blocks: int = 8, **options: object) -> BlockManager:
    """A manager over a tiny-card ThreadedBlockPool, 2 tokens a block, trying once when full."""
    pool = kvstress.pool_for_model(kvstress.ThreadedBlockPool, CARD, num_blocks, block_tokens=2, device="cpu")
    return BlockManager(pool, SHAPE, policy=PagingPolicy(queue_timeout_s=0), **options)  # type: ignore[arg-type]


def test_allocate_and_read_back() -> None:
    """kv() returns exactly the prompt's K/V, gathered over 3 blocks for 5 tokens."""
    m = manager()
    kv = prompt_kv([1, 2, 3, 4, 5], TOKEN_SHAPE)
    table = m.allocate([1, 2, 3, 4, 5], kv)
    assert torch.equal(table.kv(), kv)
    assert (table.num_tokens, len(table.block_ids())) == (5, 3)


def test_append_takes_a_block_only_when_the_last_is_full() -> None:
    """Appending into a half-full block takes none; into a full one, exactly one."""
    m = manager(prefix_caching=False)
    table = m.allocate([1], prompt_kv([1], TOKEN_SHAPE))
    free = m.pool.free_count()
    table.append_token(2, token_kv([1, 2], TOKEN_SHAPE))
    assert m.pool.free_count() == free
    table.append_token(3, token_kv([1, 2, 3], TOKEN_SHAPE))
    assert m.pool.free_count() == free - 1
    assert torch.equal(table.kv(), prompt_kv([1, 2, 3], TOKEN_SHAPE))


def test_fork_shares_blocks_and_copies_on_first_write() -> None:
    """A fork shares every block (refcount 2); the first write into the shared tail copies it."""
    m = manager(prefix_caching=False)
    parent = m.allocate([1, 2, 3], prompt_kv([1, 2, 3], TOKEN_SHAPE))
    child = parent.fork()
    assert child.block_ids() == parent.block_ids()
    assert [b.refcount for b in parent.blocks] == [2, 2]
    before = parent.kv()
    child.append_token(9, token_kv([1, 2, 3, 9], TOKEN_SHAPE))
    assert torch.equal(parent.kv(), before)
    assert child.block_ids()[0] == parent.block_ids()[0]
    assert child.block_ids()[1] != parent.block_ids()[1]
    assert [b.refcount for b in parent.blocks] == [2, 1]
    assert m.metrics()["cow_copies"] == 1


def test_free_returns_every_block_and_refuses_a_second_free() -> None:
    """free() gives every block back (the pool is whole) and a second free raises ValueError."""
    m = manager(prefix_caching=False)
    table = m.allocate([1, 2, 3], prompt_kv([1, 2, 3], TOKEN_SHAPE))
    table.fork().free()
    table.free()
    assert m.pool.free_count() == m.pool.num_blocks
    with pytest.raises(ValueError, match="table must not be freed"):
        table.free()


def test_empty_table_reads_an_empty_kv() -> None:
    """An empty prompt gives a table with no blocks and K/V of zero tokens."""
    m = manager()
    table = m.allocate([], prompt_kv([], TOKEN_SHAPE))
    assert table.kv().shape == (2, CARD.layers, 0, CARD.kv_heads, CARD.head_dim)
    assert table.block_ids() == []


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda m: m.allocate([1, 2], torch.zeros(2, 2, 3, 2, 8)),
            r"kv must be a tensor of shape \(2, 2, 2, 2, 8\)",
        ),
        (lambda m: m.allocate("ab", torch.zeros(2, 2, 2, 2, 8)), "prompt_tokens must be a sequence of ints"),
        (lambda m: m.allocate([1, True], torch.zeros(2, 2, 2, 2, 8)), "token ids must be ints"),
        (
            lambda m: m.append(object(), 1, torch.zeros(2, 2, 2, 8)),
            "table must be a BlockTable of this manager",
        ),
        (lambda m: BlockManager(m.pool, (2, 2, 2, 8)), "block_shape must be"),
        (lambda m: BlockManager(object(), SHAPE), "pool must keep the kvstress pool protocol"),
        (lambda m: BlockManager(m.pool, SHAPE, policy="queue"), "policy must be a PagingPolicy"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_raises_value_error_naming_it(call: object, match: str) -> None:
    """Bad arguments raise ValueError naming the argument, what was expected and what came."""
    with pytest.raises(ValueError, match=match):
        call(manager())  # type: ignore[operator]


def test_append_checks_the_token_kv_shape() -> None:
    """A token's K/V of the wrong shape is refused and the table is unchanged."""
    m = manager()
    table = m.allocate([1], prompt_kv([1], TOKEN_SHAPE))
    with pytest.raises(ValueError, match=r"kv must be a tensor of shape \(2, 2, 2, 8\), got \(2, 2, 8\)"):
        table.append_token(2, torch.zeros(2, 2, 8))
    assert table.num_tokens == 1
