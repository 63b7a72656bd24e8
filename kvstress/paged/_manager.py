"""The BlockManager: block tables over any synchronous pool, with fork, copy-on-write, prefix
caching and a degradation policy for an exhausted pool.

Locking: each table has its own lock (one sequence's operations are serialised); the prefix
cache has its lock; the pool does its own locking; ``_lock`` guards only the manager's table
registry and counters. Order: table -> cache -> pool, and ``_lock`` is a leaf. The only
blocking call, a queued ``acquire``, is made holding a table lock alone.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from typing import ClassVar

import torch

from kvstress._checks import got
from kvstress._errors import PoolExhausted
from kvstress._log import get_logger
from kvstress.paged._batch import acquire_batch, batches, mark_all, release_all
from kvstress.paged._cache import PrefixCache
from kvstress.paged._hash import block_hash, chain_hashes
from kvstress.paged._inputs import check_block_shape, check_kv, check_tokens
from kvstress.paged._policy import Degradation, PagingPolicy
from kvstress.paged._protocol import BlockHandle, SyncPool
from kvstress.paged._table import BlockTable

log = get_logger("kvstress.paged")

_COUNTERS = (
    "allocations",
    "forks",
    "frees",
    "cow_copies",
    "prefix_hit_blocks",
    "truncations",
    "truncated_blocks",
    "truncated_tokens",
    "rejections",
    "queue_timeouts",
)


_NEEDED = ("acquire", "mark_in_use", "retain", "release", "free_count", "num_blocks")


class BlockManager:
    """Owns the pool reference, the prefix cache and the policy; hands out BlockTables.

    ``block_shape`` is the pool's ``(2, layers, block_tokens, kv_heads, head_dim)`` (K then V,
    tokens on axis 2; ``card.block_shape(block_tokens)``). ``prefix_caching`` False turns the
    cache off (no lookups, no inserts). ``dtype`` is only for the K/V of an empty table.
    """

    cache_type: ClassVar[type[PrefixCache]] = PrefixCache

    def __init__(
        self,
        pool: SyncPool,
        block_shape: Sequence[int],
        *,
        policy: PagingPolicy | None = None,
        prefix_caching: bool = True,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        missing = [m for m in _NEEDED if not hasattr(pool, m)]
        if missing:
            raise ValueError(f"pool must keep the kvstress pool protocol (lacks {missing}), got {got(pool)}")
        if inspect.iscoroutinefunction(pool.acquire):
            # Its calls would return coroutines never awaited, at the first allocate.
            raise ValueError(f"pool must be a threaded pool (BlockManager is synchronous), got {got(pool)}")
        shape = check_block_shape(block_shape)
        policy = PagingPolicy() if policy is None else policy
        if not isinstance(policy, PagingPolicy):
            raise ValueError(f"policy must be a PagingPolicy, got {got(policy)}")
        self.pool = pool
        self.block_shape = shape
        self.block_tokens = shape[2]
        self.token_shape = (2, shape[1], shape[3], shape[4])
        self.policy = policy
        self.prefix_caching = bool(prefix_caching)
        self.dtype = dtype
        self.cache = self.cache_type(pool)
        self._lock = threading.Lock()
        self._tables: dict[int, BlockTable] = {}
        self._next_id = 0
        self._counts = dict.fromkeys(_COUNTERS, 0)

    # -- sequences -----------------------------------------------------------------------------

    def allocate(self, prompt_tokens: Sequence[int], kv: torch.Tensor) -> BlockTable:
        """A table for a new sequence holding ``prompt_tokens`` and their K/V.

        ``kv`` has shape ``(2, layers, len(prompt_tokens), kv_heads, head_dim)``. Full blocks
        whose chained hash is cached are reused (pinned, not written); the rest is written into
        fresh blocks. Raises kvstress.PoolExhausted per the policy (nothing is kept then).
        """
        tokens = check_tokens(prompt_tokens)
        check_kv("kv", kv, (2, self.token_shape[1], len(tokens), *self.token_shape[2:]))
        table = self._register()
        with table.lock:
            try:
                matched = self._reuse_prefix(table, tokens)
                if not self._write_prompt_batched(table, tokens, kv, matched * self.block_tokens):
                    for start in range(matched * self.block_tokens, len(tokens)):
                        self._write(table, tokens[start], kv[:, :, start], may_truncate=False)
            except BaseException:
                self._release_all(table)
                self._unregister(table)
                raise
        self._count("allocations")
        return table

    def fork(self, table: BlockTable) -> BlockTable:
        """A child table sharing every block of ``table`` (refcount + 1 each, nothing copied)."""
        self._check_table(table)
        child = self._register()
        with table.lock:
            self._check_live(table)
            for index in range(len(table.blocks)):
                self._share_block(table, index)
            child.blocks = list(table.blocks)
            child.cached = list(table.cached)
            child.tokens = list(table.tokens)
            child.last_hash = table.last_hash
            child.chain_intact = table.chain_intact
        self._count("forks")
        return child

    def append(self, table: BlockTable, token: int, kv: torch.Tensor) -> None:
        """Append one token and its K/V ``(2, layers, kv_heads, head_dim)`` to ``table``.

        A new block is taken only when the last one is full; a shared last block is copied
        first (copy-on-write). Raises kvstress.PoolExhausted per the policy.
        """
        self._check_table(table)
        (checked,) = check_tokens([token])
        check_kv("kv", kv, self.token_shape)
        with table.lock:
            self._check_live(table)
            self._write(table, checked, kv)

    def free(self, table: BlockTable) -> None:
        """Release every block of ``table``; a second free raises ValueError."""
        self._check_table(table)
        with table.lock:
            self._check_live(table)
            self._release_all(table)
            table.freed = True
        self._unregister(table)
        self._count("frees")

    def kv(self, table: BlockTable) -> torch.Tensor:
        """``table``'s K/V, ``(2, layers, num_tokens, kv_heads, head_dim)`` (a copy)."""
        self._check_table(table)
        with table.lock:
            self._check_live(table)
            return table.gather().clone()

    def tables(self) -> list[BlockTable]:
        """Every live table (a snapshot)."""
        with self._lock:
            return list(self._tables.values())

    def clear_cache(self) -> int:
        """Evict every cached block no table uses; how many went back to the pool."""
        return self.cache.clear()

    def metrics(self) -> dict[str, str | float | int | None]:
        """The policy, the manager's counters and the cache's: a flat dict."""
        with self._lock:
            out: dict[str, str | float | int | None] = {
                f"policy_{k}": v for k, v in self.policy.as_dict().items()
            }
            out.update(self._counts)
            out["live_tables"] = len(self._tables)
        out["prefix_hits"] = self.cache.hits
        out["prefix_misses"] = self.cache.misses
        out["evictions"] = self.cache.evictions
        out["cached_blocks"] = len(self.cache.entries())
        out["evictable_blocks"] = self.cache.evictable()
        return out

    # -- the write path (table lock held) ------------------------------------------------------

    def _write(self, table: BlockTable, token: int, kv: torch.Tensor, *, may_truncate: bool = True) -> None:
        """Write one token into the table's next slot; register the block when it fills."""
        fill = table.fill()
        if fill == 0 or fill == self.block_tokens:
            block = self._take_block(table, may_truncate=may_truncate)
            table.blocks.append(block)
            table.cached.append(False)
            fill = 0
        else:
            block = self._writable_tail(table)
        block.data[:, :, fill].copy_(kv)
        table.tokens.append(token)
        if fill + 1 == self.block_tokens:
            self._register_full(table)

    def _write_prompt_batched(
        self, table: BlockTable, tokens: list[int], kv: torch.Tensor, start: int
    ) -> bool:
        """Write the prompt from ``start`` into fresh blocks taken in one ``acquire_many`` (a
        block's worth of K/V per copy); False, with nothing done, where the pool cannot batch."""
        size = self.block_tokens
        needed = -(-(len(tokens) - start) // size)
        if not batches(self.pool, needed):
            return False
        blocks = self._take_blocks(needed)
        for index, first in enumerate(range(start, len(tokens), size)):
            block, last = blocks[index], min(first + size, len(tokens))
            try:
                block.data[:, :, : last - first].copy_(kv[:, :, first:last])
            except BaseException:  # the table owns the blocks before this one; give back the rest
                release_all(self.pool, blocks[index:])
                raise
            table.blocks.append(block)
            table.cached.append(False)
            table.tokens.extend(tokens[first:last])
            if last - first == size:
                self._register_full(table)  # the block just filled is the table's last
        return True

    def _take_blocks(self, n: int) -> list[BlockHandle]:
        """``n`` fresh blocks (IN_USE, zeroed) for a prompt, all at once, as ``_take_block`` takes
        one: evict unused cached blocks while too few are free, then reject or queue."""
        blocks = acquire_batch(self.pool, n, 0)
        while blocks is None and self.cache.evict_one():
            blocks = acquire_batch(self.pool, n, 0)
        if blocks is None and self.policy.mode is Degradation.REJECT:
            self._count("rejections")
            raise PoolExhausted(f"no {n} free blocks ({self.pool.num_blocks} blocks, policy reject)")
        if blocks is None and self.policy.queue_timeout_s != 0:
            blocks = acquire_batch(self.pool, n, self.policy.queue_timeout_s)
        if blocks is None:
            self._count("queue_timeouts")
            raise PoolExhausted(
                f"no {n} free blocks within {self.policy.queue_timeout_s} s "
                f"({self.pool.num_blocks} blocks, policy {self.policy.mode.value})"
            )
        mark_all(self.pool, blocks)
        return blocks

    def _writable_tail(self, table: BlockTable) -> BlockHandle:
        """The last block, made private first: a block someone else references is copied."""
        tail = table.blocks[-1]
        if tail.refcount == 1 and not table.cached[-1]:
            return tail
        fresh = self._take_block(table)
        fresh.data.copy_(tail.data)
        index = len(table.blocks) - 1  # truncation never cuts the last block
        self._drop(table, index)
        table.blocks[index] = fresh
        table.cached[index] = False
        self._count("cow_copies")
        return fresh

    def _share_block(self, table: BlockTable, index: int) -> None:
        """One more reference to ``table.blocks[index]``, through the cache when it is cached."""
        if table.cached[index]:
            self.cache.share(table.blocks[index])
        else:
            self.pool.retain(table.blocks[index])

    def _register_full(self, table: BlockTable) -> None:
        """The last block just filled: chain its hash and offer it to the prefix cache."""
        if not (self.prefix_caching and table.chain_intact):
            return
        table.last_hash = block_hash(table.last_hash, table.tokens[-self.block_tokens :])
        if self.cache.insert(table.last_hash, table.blocks[-1]):
            table.cached[-1] = True

    def _reuse_prefix(self, table: BlockTable, tokens: list[int]) -> int:
        """Pin the cached blocks that match the prompt's leading full blocks; how many matched."""
        if not self.prefix_caching:
            return 0
        matched = 0
        for digest in chain_hashes(tokens, self.block_tokens):
            block = self.cache.lookup(digest)
            if block is None:
                break
            table.blocks.append(block)
            table.cached.append(True)
            table.tokens.extend(tokens[matched * self.block_tokens : (matched + 1) * self.block_tokens])
            table.last_hash = digest
            matched += 1
        self._count("prefix_hit_blocks", matched)
        return matched

    # -- taking and giving back blocks ---------------------------------------------------------

    def _take_block(self, table: BlockTable, *, may_truncate: bool = True) -> BlockHandle:
        """A fresh block (IN_USE, zeroed), or what the policy makes of an exhausted pool.

        A prompt being allocated is never truncated (that would drop the prompt itself): it
        queues, as under ``queue``; truncation is for a growing sequence's appends.
        """
        block = self._try_take()
        if block is None:
            if self.policy.mode is Degradation.REJECT:
                self._count("rejections")
                raise PoolExhausted(f"no free block ({self.pool.num_blocks} blocks, policy reject)")
            if self.policy.mode is Degradation.TRUNCATE and may_truncate and self._truncate(table):
                block = self._try_take()
        if block is None and self.policy.queue_timeout_s != 0:
            block = self.pool.acquire(self.policy.queue_timeout_s)
        if block is None:
            self._count("queue_timeouts")
            raise PoolExhausted(
                f"no free block within {self.policy.queue_timeout_s} s "
                f"({self.pool.num_blocks} blocks, policy {self.policy.mode.value})"
            )
        self.pool.mark_in_use(block)
        return block

    def _try_take(self) -> BlockHandle | None:
        """A free block now, evicting unused cached blocks (LRU first) while the pool is empty."""
        while True:
            block: BlockHandle | None = self.pool.acquire(0)
            if block is not None or not self.cache.evict_one():
                return block

    def _truncate(self, table: BlockTable) -> int:
        """Give back the blocks between the sinks and the recent window; how many (counted, logged)."""
        size, sinks = self.block_tokens, self.policy.sink_blocks
        end = len(table.blocks) - self.policy.window_blocks
        if end <= sinks:
            return 0
        for index in range(sinks, end):
            self._drop(table, index)
        cut = end - sinks
        del table.blocks[sinks:end], table.cached[sinks:end], table.tokens[sinks * size : end * size]
        table.chain_intact = False
        table.truncated_tokens += cut * size
        self._count("truncations")
        self._count("truncated_blocks", cut)
        self._count("truncated_tokens", cut * size)
        log.warning("truncated", seq=table.seq_id, blocks=cut, tokens=cut * size, kept=table.num_tokens)
        return cut

    def _drop(self, table: BlockTable, index: int) -> None:
        """Give back the table's reference to ``table.blocks[index]`` (through the cache if cached)."""
        if table.cached[index]:
            self.cache.drop(table.blocks[index])
        else:
            self.pool.release(table.blocks[index])

    def _release_all(self, table: BlockTable) -> None:
        # Cached blocks go back through the cache; the rest to the pool in one call.
        for index in range(len(table.blocks)):
            if table.cached[index]:
                self._drop(table, index)
        release_all(self.pool, [b for b, c in zip(table.blocks, table.cached, strict=True) if not c])
        table.blocks.clear()
        table.cached.clear()
        table.tokens.clear()

    # -- bookkeeping ---------------------------------------------------------------------------

    def _register(self) -> BlockTable:
        with self._lock:
            table = BlockTable(self, self._next_id)
            self._next_id += 1
            self._tables[table.seq_id] = table
            return table

    def _unregister(self, table: BlockTable) -> None:
        with self._lock:
            self._tables.pop(table.seq_id, None)

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counts[name] += by

    def _check_table(self, table: object) -> None:
        if not isinstance(table, BlockTable) or table.manager is not self:
            raise ValueError(f"table must be a BlockTable of this manager, got {got(table)}")

    def _check_live(self, table: BlockTable) -> None:
        if table.freed:
            raise ValueError(f"table must not be freed, got {table!r}")
