"""kvstress.audit and acquire_many: each block of a batch checked as acquire's, silent on ours."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import kvstress
from kvstress import AuditedBlock, InvariantViolation
from kvstress.mutants._condvar_pool import CondvarPool


class DirtyBatchPool(kvstress.ThreadedBlockPool):
    """Hands out its batches with data left in the last block (a pool bug)."""

    def acquire_many(self, n: int, timeout: float | None = None) -> Any:
        blocks = super().acquire_many(n, timeout)
        if blocks:
            blocks[-1].data.fill_(7.0)
        return blocks


class ShortBatchPool(kvstress.ThreadedBlockPool):
    """Answers a batch with one block fewer than asked (a pool bug)."""

    def acquire_many(self, n: int, timeout: float | None = None) -> Any:
        blocks = super().acquire_many(n, timeout)
        return None if blocks is None else blocks[:-1]


def test_a_batch_is_audited_block_by_block_and_comes_back() -> None:
    """Our threaded pool: n audited handles, marked, freed by one release_many; close() passes."""
    with kvstress.audit(kvstress.ThreadedBlockPool(4, (2, 4))) as pool:
        blocks = pool.acquire_many(3, 0)
        assert blocks is not None and len(blocks) == 3
        assert all(isinstance(block, AuditedBlock) for block in blocks)
        assert len({block.id for block in blocks}) == 3
        for block in blocks:
            pool.mark_in_use(block)
            block.data.fill_(1.0)
        assert pool.acquire_many(2, 0) is None  # one free: all or nothing
        assert pool.release_many(blocks) == [True, True, True]


def test_a_batch_released_twice_is_caught() -> None:
    """A handle from acquire_many is checked like any other: a second release is refused."""
    pool = kvstress.audit(kvstress.ThreadedBlockPool(2, (2, 4)))
    blocks = pool.acquire_many(2, 0)
    assert blocks is not None
    pool.release_many(blocks)
    with pytest.raises(InvariantViolation) as caught:
        pool.release(blocks[0])
    assert caught.value.invariant == "double-release"


@pytest.mark.parametrize(
    ("pool_type", "invariant"), [(DirtyBatchPool, "dirty-read"), (ShortBatchPool, "lost-block")]
)
def test_a_pool_bug_in_acquire_many_is_caught(pool_type: type, invariant: str) -> None:
    """A dirty block in a batch, or a batch of the wrong size, is the pool's violation."""
    pool = kvstress.audit(pool_type(4, (2, 4)))
    with pytest.raises(InvariantViolation) as caught:
        pool.acquire_many(2, 0)
    assert caught.value.invariant == invariant


def test_a_pool_without_acquire_many_has_none_through_the_audit() -> None:
    """Optional members stay optional: absent on the pool, absent on the audit, so a caller
    falls back to acquire; the pool's other handle calls are never forwarded unaudited."""
    pool = kvstress.audit(CondvarPool(2, (2, 4)))
    assert getattr(pool, "acquire_many", None) is None
    assert getattr(kvstress.audit(kvstress.ThreadedBlockPool(2, (2, 4))), "mark_in_use_many", None) is None


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_batch_is_audited_and_comes_back(backend: str) -> None:
    """The async pool's acquire_many through the audit: n checked handles, close() passes."""

    async def body() -> None:
        async with kvstress.audit(kvstress.AsyncBlockPool(3, (2, 4))) as pool:
            blocks = await pool.acquire_many(2, 0)
            assert blocks is not None and len(blocks) == 2
            assert await pool.acquire_many(2, 0) is None
            assert await pool.release_many(blocks) == [True, True]

    anyio.run(body, backend=backend)
