"""The prefix cache: chained stable hashes, hits that pin, LRU eviction that unhashes first."""

from __future__ import annotations

import subprocess
import sys

import torch

import kvstress
from kvstress.paged import BlockManager, PagingPolicy, block_hash, chain_hashes
from kvstress.paged._check import check_refcounts
from kvstress.paged._machine import prompt_kv

SHAPE = (2, 2, 2, 2, 8)
TOKEN_SHAPE = (2, 2, 2, 8)


def manager(num_blocks: int = 8) -> BlockManager:
    """A manager over a small ThreadedBlockPool, 2 tokens a block, trying once when full."""
    pool = kvstress.ThreadedBlockPool(num_blocks, SHAPE, device="cpu")
    return BlockManager(pool, SHAPE, policy=PagingPolicy(queue_timeout_s=0))


def allocate(m: BlockManager, tokens: list[int]) -> kvstress.paged.BlockTable:
    """Allocate ``tokens`` with the model's K/V."""
    return m.allocate(tokens, prompt_kv(tokens, TOKEN_SHAPE))


def test_hash_is_chained_and_stable_across_processes() -> None:
    """Equal tokens after different parents hash differently; a fresh interpreter agrees."""
    assert block_hash(b"", [1, 2]) != block_hash(block_hash(b"", [9, 9]), [1, 2])
    assert chain_hashes([1, 2, 3, 4, 5], 2) == [
        block_hash(b"", [1, 2]),
        block_hash(block_hash(b"", [1, 2]), [3, 4]),
    ]
    code = "from kvstress.paged import block_hash; print(block_hash(b'', [1, 2]).hex())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == block_hash(b"", [1, 2]).hex()


def test_a_matching_prefix_reuses_the_cached_blocks() -> None:
    """A second prompt with the same leading full blocks shares them and reads the same K/V."""
    m = manager()
    first = allocate(m, [1, 2, 3, 4, 5])
    second = allocate(m, [1, 2, 3, 4, 6])
    assert second.block_ids()[:2] == first.block_ids()[:2]
    assert second.block_ids()[2] != first.block_ids()[2]
    assert torch.equal(second.kv(), prompt_kv([1, 2, 3, 4, 6], TOKEN_SHAPE))
    assert m.metrics()["prefix_hit_blocks"] == 2
    assert [b.refcount for b in first.blocks[:2]] == [3, 3]  # two tables and the cache
    check_refcounts(m)


def test_freed_cached_blocks_stay_reusable_until_evicted() -> None:
    """After every table is freed, a cached block keeps its K/V and the next prompt hits it."""
    m = manager()
    allocate(m, [1, 2, 3, 4]).free()
    assert m.pool.free_count() == m.pool.num_blocks - 2  # the cache holds its reference
    again = allocate(m, [1, 2, 3, 4])
    assert torch.equal(again.kv(), prompt_kv([1, 2, 3, 4], TOKEN_SHAPE))
    assert m.metrics()["prefix_hits"] == 2


def test_exhaustion_evicts_least_recently_used_first_and_unhashes() -> None:
    """A full pool evicts the unused entry freed first; its hash can no longer be found."""
    m = manager(num_blocks=4)
    allocate(m, [1, 2]).free()  # cached, LRU oldest
    allocate(m, [3, 4]).free()
    allocate(m, [5, 6]).free()
    holder = allocate(m, [7, 8])  # 4 cached blocks: the pool is empty
    assert m.pool.free_count() == 0
    allocate(m, [9, 9])  # needs one block: evicts [1, 2]
    assert m.metrics()["evictions"] == 1
    assert not any(e.hash == block_hash(b"", [1, 2]) for e in m.cache.entries())
    assert m.cache.lookup(block_hash(b"", [3, 4])) is not None  # still cached
    assert holder.num_tokens == 2


def test_blocks_in_use_are_never_evicted() -> None:
    """Cached blocks some table uses stay put: a full pool then answers PoolExhausted."""
    m = manager(num_blocks=2)
    allocate(m, [1, 2, 3, 4])
    try:
        allocate(m, [5, 6])
    except kvstress.PoolExhausted:
        pass
    else:
        raise AssertionError("allocate succeeded without a free or evictable block")
    assert m.metrics()["evictions"] == 0


def test_clear_cache_gives_back_unused_blocks_only() -> None:
    """clear_cache evicts the unused entries and leaves those a table holds."""
    m = manager()
    kept = allocate(m, [1, 2])
    allocate(m, [3, 4]).free()
    assert m.clear_cache() == 1
    assert [e.block.id for e in m.cache.entries()] == kept.block_ids()
    kept.free()
    assert m.clear_cache() == 1
    assert m.pool.free_count() == m.pool.num_blocks
