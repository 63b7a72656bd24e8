"""Shadow mode: a tiny decoder reads its KV cache from a pool's blocks beside a reference.

``shadow(factory, ...)`` decodes several interleaved sequences on a small pool, under the
deterministic thread scheduler, and compares the paged logits with a reference that keeps K/V
in fresh tensors, step by step. The first divergence names the step and the block whose K/V
read back differed from what was written. ``kvstress shadow --pool MODULE:ATTR`` runs it.

This module only re-exports; everything is defined in private modules.
"""

from kvstress.shadow._decoder import KVCache as KVCache
from kvstress.shadow._decoder import ReferenceCache as ReferenceCache
from kvstress.shadow._decoder import TinyDecoder as TinyDecoder
from kvstress.shadow._paged import PagedCache as PagedCache
from kvstress.shadow._result import BlockBlame as BlockBlame
from kvstress.shadow._result import Divergence as Divergence
from kvstress.shadow._result import PoolFailure as PoolFailure
from kvstress.shadow._result import ShadowResult as ShadowResult
from kvstress.shadow._run import TOLERANCE as TOLERANCE
from kvstress.shadow._run import shadow as shadow
