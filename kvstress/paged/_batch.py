"""Whole-table pool calls for the paged layer: one ``acquire_many`` for a prompt's fresh blocks,
one ``mark_in_use_many`` to mark them, one ``release_many`` for a table's blocks, on a pool that
has them; one call per block on a pool that keeps only the basic protocol (all three are
optional members)."""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.paged._protocol import BlockHandle, SyncPool


def batches(pool: SyncPool, n: int) -> bool:
    """Whether ``n`` blocks can be asked of ``pool`` in one ``acquire_many`` call."""
    return 1 < n <= pool.num_blocks and callable(getattr(pool, "acquire_many", None))


def acquire_batch(pool: SyncPool, n: int, timeout: float | None) -> list[BlockHandle] | None:
    """``n`` blocks in one call (see ``batches``), or None when they do not all come in time."""
    blocks: list[BlockHandle] | None = pool.acquire_many(n, timeout)  # type: ignore[attr-defined]
    return blocks


def mark_all(pool: SyncPool, blocks: Sequence[BlockHandle]) -> None:
    """Mark each block IN_USE: one ``mark_in_use_many`` where the pool has it."""
    if len(blocks) > 1 and callable(getattr(pool, "mark_in_use_many", None)):
        pool.mark_in_use_many(list(blocks))  # type: ignore[attr-defined]
        return
    for block in blocks:
        pool.mark_in_use(block)


def release_all(pool: SyncPool, blocks: Sequence[BlockHandle]) -> None:
    """Give back one reference to each block: one ``release_many`` where the pool has it."""
    if len(blocks) > 1 and callable(getattr(pool, "release_many", None)):
        pool.release_many(list(blocks))  # type: ignore[attr-defined]
        return
    for block in blocks:
        pool.release(block)
