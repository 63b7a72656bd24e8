"""Planted bugs in the paged layer: each a subclass overriding one method of the correct code.

The machine (tests/test_paged_machine.py) or the controlled scenarios
(tests/test_paged_scenarios.py) must catch each one; the correct classes must stay clean.
"""

from __future__ import annotations

from kvstress.paged import BlockManager, BlockTable, PrefixCache
from kvstress.paged._protocol import BlockHandle


class CowInPlaceManager(BlockManager):
    """Copy-on-write forgotten: a shared last block is written in place."""

    def _writable_tail(self, table: BlockTable) -> BlockHandle:
        return table.blocks[-1]


class ForkWithoutRetainManager(BlockManager):
    """A fork shares the parent's blocks without taking a reference to them."""

    def _share_block(self, table: BlockTable, index: int) -> None:
        return None


class UnpinnedLookupCache(PrefixCache):
    """Time-of-check/time-of-use: the lookup finds the block under the lock, pins it after."""

    def lookup(self, block_hash: bytes) -> BlockHandle | None:
        with self._lock:
            entry = self._entries.get(block_hash)
            if entry is None:
                self.misses += 1
                return None
        # the window: another worker may evict the entry and reuse its block here
        self._pool.retain(entry.block)
        with self._lock:
            self._lru.pop(entry.hash, None)
            entry.users += 1
            self.hits += 1
        return entry.block


class ReleaseBeforeUnhashCache(PrefixCache):
    """Eviction gives the block back to the pool before it removes the hash."""

    def evict_one(self) -> bool:
        with self._lock:
            if not self._lru:
                return False
            block_hash, _ = self._lru.popitem(last=False)
            entry = self._entries[block_hash]
        self._pool.release(entry.block)  # offered, and reusable, while still findable
        with self._lock:
            self._entries.pop(block_hash, None)
            self._by_block.pop(entry.block.id, None)
            self.evictions += 1
        return True


class UnpinnedLookupManager(BlockManager):
    """A manager whose prefix cache pins after the lookup (UnpinnedLookupCache)."""

    cache_type = UnpinnedLookupCache


class ReleaseBeforeUnhashManager(BlockManager):
    """A manager whose prefix cache releases before unhashing (ReleaseBeforeUnhashCache)."""

    cache_type = ReleaseBeforeUnhashCache
