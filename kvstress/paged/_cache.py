"""Automatic prefix caching: full blocks found by their chained hash, kept alive by the cache.

Our pools zero a block before offering it back, so a cached block cannot wait in the pool's free
queue with its K/V. The cache therefore holds one pool reference to every block it indexes: a
cached block stays held (ACQUIRED or IN_USE) and its data survives the tables that filled it.

Invariants, under ``_lock``:
- ``_entries`` maps a hash to the one cached block with that content; ``_by_block`` is its
  inverse (block id -> hash), so each block is cached at most once;
- an entry's ``users`` is the number of tables that reference its block through the cache, and
  the block's refcount is ``users + 1`` (the +1 is the cache's own reference);
- ``_lru`` holds exactly the entries with ``users == 0``, least recently used first; only those
  may be evicted, and eviction removes the hash before it gives the block back.
Lock order: the cache lock may be held while calling the pool (never the other way round); no
blocking call (an acquire) is made under it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from kvstress.paged._protocol import BlockHandle, SyncPool


@dataclass(slots=True)
class CacheEntry:
    """One cached block: its handle, its hash and how many tables use it now."""

    block: BlockHandle
    hash: bytes
    users: int


class PrefixCache:
    """The hash -> block index with an LRU of unused entries. Thread-safe; see the module doc."""

    def __init__(self, pool: SyncPool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._entries: dict[bytes, CacheEntry] = {}
        self._by_block: dict[int, bytes] = {}
        self._lru: OrderedDict[bytes, None] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def lookup(self, block_hash: bytes) -> BlockHandle | None:
        """The cached block with this hash, pinned for the caller (refcount + 1, one more user).

        Lookup and pin are one step under the lock: an entry found cannot be evicted, and its
        block reused, before the caller holds its reference. None on a miss.
        """
        with self._lock:
            entry = self._entries.get(block_hash)
            if entry is None:
                self.misses += 1
                return None
            self._pool.retain(entry.block)
            self._add_user(entry)
            self.hits += 1
            return entry.block

    def insert(self, block_hash: bytes, block: BlockHandle) -> bool:
        """Index a full block that one table holds; True when it is now cached (that table a user).

        The cache takes its own reference. False (nothing changes) when the hash is cached
        already, on another block: the caller's block stays a private, uncached one.
        """
        with self._lock:
            if block_hash in self._entries or block.id in self._by_block:
                return False
            self._pool.retain(block)
            self._entries[block_hash] = CacheEntry(block, block_hash, users=1)
            self._by_block[block.id] = block_hash
            return True

    def share(self, block: BlockHandle) -> None:
        """One more table uses a cached block it reaches through another table (a fork)."""
        with self._lock:
            entry = self._entries[self._by_block[block.id]]
            self._pool.retain(block)
            self._add_user(entry)

    def drop(self, block: BlockHandle) -> None:
        """A table gives back its reference to a cached block; the last user puts it in the LRU."""
        with self._lock:
            entry = self._entries[self._by_block[block.id]]
            entry.users -= 1
            self._pool.release(block)  # never the last reference: the cache holds one
            if entry.users == 0:
                self._lru[entry.hash] = None

    def evict_one(self) -> bool:
        """Give the least recently used unused block back to the pool; False when there is none.

        The hash is removed first, so no lookup can find the block once the pool may reuse it.
        """
        with self._lock:
            if not self._lru:
                return False
            block_hash, _ = self._lru.popitem(last=False)
            entry = self._entries.pop(block_hash)
            del self._by_block[entry.block.id]
            self.evictions += 1
            self._pool.release(entry.block)
            return True

    def clear(self) -> int:
        """Evict every unused entry (blocks still used by a table stay cached); how many went."""
        evicted = 0
        while self.evict_one():
            evicted += 1
        return evicted

    def is_cached(self, block_id: int) -> bool:
        """Whether the block with this id is in the cache now."""
        with self._lock:
            return block_id in self._by_block

    def entries(self) -> list[CacheEntry]:
        """A snapshot of every entry (copies: changing them changes nothing)."""
        with self._lock:
            return [CacheEntry(e.block, e.hash, e.users) for e in self._entries.values()]

    def evictable(self) -> int:
        """How many entries no table uses (the LRU's length)."""
        with self._lock:
            return len(self._lru)

    def _add_user(self, entry: CacheEntry) -> None:
        if entry.users == 0:
            del self._lru[entry.hash]
        entry.users += 1
