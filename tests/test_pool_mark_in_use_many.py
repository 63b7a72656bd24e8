"""mark_in_use_many: ACQUIRED -> IN_USE for a batch in one lock section, all or nothing."""

from __future__ import annotations

import anyio
import pytest

from kvstress import (
    AsyncBlockPool,
    AsyncTieredBlockPool,
    InvalidTransition,
    ThreadedBlockPool,
    TieredBlockPool,
)
from kvstress.pool._block import Block

SYNC = [ThreadedBlockPool, TieredBlockPool]


def _states(pool: ThreadedBlockPool) -> list[str]:
    return [info.state.name for info in pool.dump()]


def _taken(pool: ThreadedBlockPool, n: int) -> list[Block]:
    blocks = pool.acquire_many(n, 0)
    assert blocks is not None
    return blocks


@pytest.mark.parametrize("factory", SYNC)
def test_marks_a_batch_in_use(factory: type[ThreadedBlockPool]) -> None:
    """Every block of a fresh batch (a run of ids) goes to IN_USE; refcounts and counters stay."""
    pool = factory(8, (2,))
    blocks = _taken(pool, 5)
    pool.mark_in_use_many(blocks)
    assert [b.state.name for b in blocks] == ["IN_USE"] * 5
    assert all(b.refcount == 1 for b in blocks) and pool.free_count() == 3
    assert pool.release_many(blocks) == [True] * 5
    assert _states(pool) == ["FREE"] * 8


@pytest.mark.parametrize("factory", SYNC)
def test_marks_blocks_that_are_not_one_run(factory: type[ThreadedBlockPool]) -> None:
    """Blocks out of order, or from separate acquires, are marked by the per-block path alike."""
    pool = factory(8, (2,))
    blocks = [pool.acquire(0) for _ in range(4)]
    assert all(b is not None for b in blocks)
    chosen = [blocks[3], blocks[0], blocks[2]]
    pool.mark_in_use_many(chosen)  # type: ignore[arg-type]
    assert [b.state.name for b in blocks] == ["IN_USE", "ACQUIRED", "IN_USE", "IN_USE"]  # type: ignore[union-attr]


def test_an_empty_batch_marks_nothing() -> None:
    """An empty list is a batch of none: nothing changes, nothing raises."""
    pool = ThreadedBlockPool(3, (2,))
    pool.mark_in_use_many([])
    assert _states(pool) == ["FREE"] * 3


@pytest.mark.parametrize("factory", SYNC)
def test_a_block_not_held_refuses_the_whole_batch(factory: type[ThreadedBlockPool]) -> None:
    """A released handle in the batch (its block FREE) raises InvalidTransition; none is marked."""
    pool = factory(8, (2,))
    blocks = _taken(pool, 4)
    pool.release(blocks[2])
    before = _states(pool)
    with pytest.raises(InvalidTransition, match=f"block {blocks[2].id} is FREE; mark_in_use_many"):
        pool.mark_in_use_many(blocks)
    assert _states(pool) == before
    assert [b.state.name for b in (blocks[0], blocks[1], blocks[3])] == ["ACQUIRED"] * 3


@pytest.mark.parametrize("factory", SYNC)
def test_a_duplicate_refuses_the_whole_batch(factory: type[ThreadedBlockPool]) -> None:
    """A block listed twice raises (its second mark would find it IN_USE) and marks none."""
    pool = factory(8, (2,))
    blocks = _taken(pool, 3)
    with pytest.raises(InvalidTransition, match=f"block {blocks[1].id} .*listed twice"):
        pool.mark_in_use_many([blocks[0], blocks[1], blocks[2], blocks[1]])
    assert [b.state.name for b in blocks] == ["ACQUIRED"] * 3


@pytest.mark.parametrize("factory", SYNC)
def test_a_mix_with_a_block_already_in_use_refuses_the_whole_batch(factory: type[ThreadedBlockPool]) -> None:
    """A run holding one IN_USE block among ACQUIRED ones raises as mark_in_use, marking none."""
    pool = factory(8, (2,))
    blocks = _taken(pool, 4)
    pool.mark_in_use(blocks[1])
    with pytest.raises(InvalidTransition, match=f"block {blocks[1].id} is IN_USE; mark_in_use_many"):
        pool.mark_in_use_many(blocks)
    assert [b.state.name for b in blocks] == ["ACQUIRED", "IN_USE", "ACQUIRED", "ACQUIRED"]


def test_a_handle_of_the_previous_tenancy_refuses_the_batch() -> None:
    """A stale handle whose block was taken again by another batch is refused; nothing changes."""
    pool = ThreadedBlockPool(2, (2,))
    old = _taken(pool, 2)
    pool.release_many(old)
    new = _taken(pool, 2)
    with pytest.raises(InvalidTransition, match="stale handle"):
        pool.mark_in_use_many(old)
    assert [b.state.name for b in new] == ["ACQUIRED"] * 2
    pool.mark_in_use_many(new)
    assert [b.state.name for b in new] == ["IN_USE"] * 2


@pytest.mark.parametrize("bad", [[object()], ["3"], [None]])
def test_a_foreign_handle_raises_value_error_before_any_change(bad: list[object]) -> None:
    """Something that is not this pool's Block raises ValueError naming the block; none marked."""
    pool = ThreadedBlockPool(4, (2,))
    blocks = _taken(pool, 2)
    with pytest.raises(ValueError, match="block must be a Block handed out by this pool"):
        pool.mark_in_use_many([*blocks, *bad])  # type: ignore[list-item]
    assert [b.state.name for b in blocks] == ["ACQUIRED"] * 2


def test_another_pools_handle_raises_value_error() -> None:
    """A Block of another pool in the batch is refused before any change."""
    pool, other = ThreadedBlockPool(4, (2,)), ThreadedBlockPool(4, (2,))
    mine, theirs = _taken(pool, 2), _taken(other, 1)
    with pytest.raises(ValueError, match="block must be a Block handed out by this pool"):
        pool.mark_in_use_many([*mine, *theirs])
    assert [b.state.name for b in mine] == ["ACQUIRED"] * 2


def test_mark_in_use_still_refuses_as_before() -> None:
    """The inlined per-block mark refuses a second mark, a released block and a stale handle."""
    pool = ThreadedBlockPool(2, (2,))
    block = pool.acquire(0)
    assert block is not None
    pool.mark_in_use(block)
    with pytest.raises(InvalidTransition, match="is IN_USE; mark_in_use \\(ACQUIRED -> IN_USE\\)"):
        pool.mark_in_use(block)
    pool.release(block)
    with pytest.raises(InvalidTransition, match="is FREE; mark_in_use"):
        pool.mark_in_use(block)
    again = pool.acquire(0)  # both blocks taken again: one is the released handle's block
    other = pool.acquire(0)
    assert again is not None and other is not None
    with pytest.raises(InvalidTransition, match="stale handle"):
        pool.mark_in_use(block)
    assert again.state.name == "ACQUIRED" and other.state.name == "ACQUIRED"
    with pytest.raises(ValueError, match="block must be a Block"):
        pool.mark_in_use(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("factory", [AsyncBlockPool, AsyncTieredBlockPool])
def test_async_pools_mark_all_or_nothing(backend: str, factory: type[AsyncBlockPool]) -> None:
    """The async pools mark a batch, and refuse a mixed one changing nothing."""

    async def main() -> None:
        pool = factory(6, (2,))
        blocks = await pool.acquire_many(3, 0)
        assert blocks is not None
        await pool.release(blocks[0])
        with pytest.raises(InvalidTransition):
            pool.mark_in_use_many(blocks)
        assert [b.state.name for b in blocks[1:]] == ["ACQUIRED"] * 2
        pool.mark_in_use_many(blocks[1:])
        assert [b.state.name for b in blocks[1:]] == ["IN_USE"] * 2
        assert await pool.release_many(blocks[1:]) == [True] * 2

    anyio.run(main, backend=backend)
