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
        (
            lambda m: BlockManager(kvstress.audit(kvstress.AsyncBlockPool(2, SHAPE)), SHAPE),
            r"pool must be a threaded pool \(BlockManager is synchronous\), got <AsyncAuditedPool",
        ),
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


class _CountingPool(kvstress.ThreadedBlockPool):
    """Our pool, counting the calls the manager makes on it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.calls: list[str] = []

    def acquire(self, timeout: float | None = None) -> kvstress.Block | None:
        self.calls.append("acquire")
        return super().acquire(timeout)

    def acquire_many(self, n: int, timeout: float | None = None) -> list[kvstress.Block] | None:
        self.calls.append(f"acquire_many({n})")
        return super().acquire_many(n, timeout)

    def mark_in_use(self, block: kvstress.Block) -> None:
        self.calls.append("mark_in_use")
        super().mark_in_use(block)

    def mark_in_use_many(self, blocks: list[kvstress.Block]) -> None:  # type: ignore[override]
        self.calls.append(f"mark_in_use_many({len(blocks)})")
        super().mark_in_use_many(blocks)

    def release(self, block: kvstress.Block) -> bool:
        self.calls.append("release")
        return super().release(block)

    def release_many(self, blocks: list[kvstress.Block]) -> list[bool]:  # type: ignore[override]
        self.calls.append(f"release_many({len(blocks)})")
        return super().release_many(blocks)


def test_a_prompt_takes_its_blocks_in_one_call_and_a_free_returns_them_in_one() -> None:
    """allocate takes a 5-token prompt's 3 blocks with one acquire_many and marks them with one
    mark_in_use_many; free returns them with one release_many."""
    pool = kvstress.pool_for_model(_CountingPool, CARD, 8, block_tokens=2, device="cpu")
    m = BlockManager(pool, SHAPE, policy=PagingPolicy(queue_timeout_s=0), prefix_caching=False)  # type: ignore[arg-type]
    kv = prompt_kv([1, 2, 3, 4, 5], TOKEN_SHAPE)
    table = m.allocate([1, 2, 3, 4, 5], kv)
    assert torch.equal(table.kv(), kv) and pool.calls == ["acquire_many(3)", "mark_in_use_many(3)"]
    assert all(b.state.name == "IN_USE" for b in table.blocks)  # type: ignore[attr-defined]
    table.free()
    assert pool.calls[2:] == ["release_many(3)"] and pool.free_count() == 8


class _NoBatchMarkPool(_CountingPool):
    """Our pool without the optional mark_in_use_many (as another pool might be)."""

    mark_in_use_many = None  # type: ignore[assignment]


def test_a_pool_without_mark_in_use_many_gets_one_mark_per_block() -> None:
    """A pool with acquire_many but no mark_in_use_many has each fresh block marked by itself."""
    pool = kvstress.pool_for_model(_NoBatchMarkPool, CARD, 8, block_tokens=2, device="cpu")
    m = BlockManager(pool, SHAPE, policy=PagingPolicy(queue_timeout_s=0), prefix_caching=False)  # type: ignore[arg-type]
    kv = prompt_kv([1, 2, 3, 4, 5], TOKEN_SHAPE)
    table = m.allocate([1, 2, 3, 4, 5], kv)
    assert torch.equal(table.kv(), kv)
    assert pool.calls == ["acquire_many(3)", "mark_in_use", "mark_in_use", "mark_in_use"]
    assert all(b.state.name == "IN_USE" for b in table.blocks)  # type: ignore[attr-defined]


def test_a_batched_prompt_waits_for_all_its_blocks_or_takes_none() -> None:
    """A prompt needing more blocks than are free raises PoolExhausted and holds none of them."""
    m = manager(num_blocks=4, prefix_caching=False)
    m.allocate([1, 2, 3], prompt_kv([1, 2, 3], TOKEN_SHAPE))
    with pytest.raises(kvstress.PoolExhausted, match="no 3 free blocks"):
        m.allocate([1, 2, 3, 4, 5], prompt_kv([1, 2, 3, 4, 5], TOKEN_SHAPE))
    assert m.pool.free_count() == 2 and m.metrics()["queue_timeouts"] == 1


def test_a_pool_without_the_batch_calls_is_served_one_block_at_a_time() -> None:
    """A pool keeping only the basic protocol (CondvarPool) gets per-block calls, same contents."""
    from kvstress.mutants._condvar_pool import CondvarPool

    pool = kvstress.pool_for_model(CondvarPool, CARD, 8, block_tokens=2, device="cpu")
    m = BlockManager(pool, SHAPE, policy=PagingPolicy(queue_timeout_s=0))  # type: ignore[arg-type]
    kv = prompt_kv([1, 2, 3, 4, 5], TOKEN_SHAPE)
    table = m.allocate([1, 2, 3, 4, 5], kv)
    assert torch.equal(table.kv(), kv)
    table.free()
    m.clear_cache()
    assert pool.free_count() == 8
