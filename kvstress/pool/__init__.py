"""The system under test: the reference KV-cache block pools and their protocol."""

from kvstress.pool._async import AsyncBlockPool as AsyncBlockPool
from kvstress.pool._base import BlockInfo as BlockInfo
from kvstress.pool._block import Block as Block
from kvstress.pool._leaks import LeakDetection as LeakDetection
from kvstress.pool._leaks import LeakSuspect as LeakSuspect
from kvstress.pool._state import BlockState as BlockState
from kvstress.pool._threaded import ThreadedBlockPool as ThreadedBlockPool
from kvstress.pool._tiered import AsyncTieredBlockPool as AsyncTieredBlockPool
from kvstress.pool._tiered import TieredBlockPool as TieredBlockPool
