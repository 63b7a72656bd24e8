"""Paged KV on any block pool: block tables, fork with copy-on-write, prefix caching, degradation.

This module only re-exports; everything is defined in private modules.
"""

from kvstress.paged._cache import CacheEntry as CacheEntry
from kvstress.paged._cache import PrefixCache as PrefixCache
from kvstress.paged._hash import block_hash as block_hash
from kvstress.paged._hash import chain_hashes as chain_hashes
from kvstress.paged._machine import PagedMachine as PagedMachine
from kvstress.paged._machine import paged_machine as paged_machine
from kvstress.paged._manager import BlockManager as BlockManager
from kvstress.paged._policy import Degradation as Degradation
from kvstress.paged._policy import PagingPolicy as PagingPolicy
from kvstress.paged._table import BlockTable as BlockTable
