"""kvstress: prove a KV-cache block pool correct under concurrency.

This module only re-exports the public API; everything is defined in private modules.
"""

from kvstress._errors import InvalidTransition as InvalidTransition
from kvstress._errors import PoolExhausted as PoolExhausted
from kvstress.pool import AsyncBlockPool as AsyncBlockPool
from kvstress.pool import Block as Block
from kvstress.pool import BlockInfo as BlockInfo
from kvstress.pool import BlockState as BlockState
from kvstress.pool import LeakDetection as LeakDetection
from kvstress.pool import LeakSuspect as LeakSuspect
from kvstress.pool import ThreadedBlockPool as ThreadedBlockPool

__version__ = "0.1.0"
