"""Checks of the paged layer's promises; each raises InvariantViolation with a stable id.

They read the manager's tables and cache and the pool through its protocol only, so they hold
for any pool that keeps the protocol. ``check_refcounts`` and ``check_free_count`` need a quiet
manager (no operation in flight).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch

from kvstress._violation import InvariantViolation
from kvstress.paged._manager import BlockManager
from kvstress.paged._protocol import BlockHandle


def references(manager: BlockManager) -> tuple[dict[int, BlockHandle], Counter[int], Counter[int]]:
    """Every referenced block by id, how many tables reference each, and through the cache how many."""
    handles: dict[int, BlockHandle] = {}
    tables: Counter[int] = Counter()
    through_cache: Counter[int] = Counter()
    for table in manager.tables():
        with table.lock:
            for block, cached in zip(table.blocks, table.cached, strict=True):
                handles[block.id] = block
                tables[block.id] += 1
                through_cache[block.id] += cached
    for entry in manager.cache.entries():
        handles[entry.block.id] = entry.block
    return handles, tables, through_cache


def check_refcounts(manager: BlockManager) -> None:
    """Each block's refcount == the tables referencing it (+1 when cached); users add up."""
    handles, tables, through_cache = references(manager)
    entries = {entry.block.id: entry for entry in manager.cache.entries()}
    for block_id, block in sorted(handles.items()):
        entry = entries.get(block_id)
        expected = tables[block_id] + (entry is not None)
        if block.refcount != expected:
            raise InvariantViolation(
                "refcount",
                f"block {block_id} has refcount {block.refcount}, but {tables[block_id]} tables "
                f"reference it{' and the prefix cache holds it' if entry else ''}: expected {expected}",
            )
        users = 0 if entry is None else entry.users
        if through_cache[block_id] != users or (entry is not None and tables[block_id] != users):
            raise InvariantViolation(
                "refcount",
                f"block {block_id}: the cache counts {users} users, but {tables[block_id]} tables "
                f"reference it, {through_cache[block_id]} of them through the cache",
            )


def check_free_count(manager: BlockManager) -> None:
    """The pool's free count == its blocks minus those a table or the cache references."""
    handles, _, _ = references(manager)
    pool = manager.pool
    expected = pool.num_blocks - len(handles)
    if pool.free_count() != expected:
        raise InvariantViolation(
            "lost-block",
            f"free_count() is {pool.free_count()}, but {len(handles)} of {pool.num_blocks} blocks are "
            f"referenced: expected {expected}",
        )


def check_cached_content(manager: BlockManager, expected: Mapping[bytes, torch.Tensor]) -> None:
    """Each cached block holds exactly the K/V that was cached under its hash."""
    for entry in manager.cache.entries():
        want = expected.get(entry.hash)
        if want is None:
            raise InvariantViolation("dirty-read", f"block {entry.block.id} is cached under an unknown hash")
        if not torch.equal(entry.block.data, want):
            raise InvariantViolation(
                "dirty-read",
                f"cached block {entry.block.id} no longer holds the K/V cached under its hash "
                f"{entry.hash.hex()[:12]}: a prefix hit would read another sequence's K/V",
            )


def check_unchanged(manager: BlockManager, snapshot: Mapping[int, torch.Tensor], writer: int) -> None:
    """Blocks that tables other than ``writer`` still reference hold what they held before."""
    for table in manager.tables():
        if table.seq_id == writer:
            continue
        with table.lock:
            for block in table.blocks:
                before = snapshot.get(block.id)
                if before is not None and not torch.equal(block.data, before):
                    raise InvariantViolation(
                        "shared-block",
                        f"block {block.id}, shared with table {table.seq_id}, was written in place "
                        f"through table {writer} (copy-on-write must copy it first)",
                    )


def shared_snapshot(manager: BlockManager, writer: int) -> dict[int, torch.Tensor]:
    """Copies of every block a table other than ``writer`` references (for check_unchanged)."""
    out: dict[int, torch.Tensor] = {}
    for table in manager.tables():
        if table.seq_id != writer:
            with table.lock:
                out.update({block.id: block.data.clone() for block in table.blocks})
    return out


def check_whole(manager: BlockManager) -> None:
    """With no table left and the cache cleared: every block is free and all zeros.

    Takes every block through the protocol (acquire with timeout 0), checks it, gives it back.
    """
    pool = manager.pool
    if manager.tables() or manager.cache.entries():
        raise InvariantViolation("lost-block", "check_whole needs no live table and an empty cache")
    if pool.free_count() != pool.num_blocks:
        raise InvariantViolation(
            "lost-block", f"free_count() is {pool.free_count()} of {pool.num_blocks} with nothing referenced"
        )
    taken: list[Any] = []
    try:
        for _ in range(pool.num_blocks):
            block = pool.acquire(0)
            if block is None:
                raise InvariantViolation(
                    "lost-block", f"only {len(taken)} of {pool.num_blocks} blocks could be acquired"
                )
            taken.append(block)
            if bool(block.data.any()):
                raise InvariantViolation("dirty-read", f"block {block.id} is not all zeros once freed")
    finally:
        for block in taken:
            pool.release(block)
