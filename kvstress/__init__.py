"""kvstress: prove a KV-cache block pool correct under concurrency.

This module only re-exports the public API; everything is defined in private modules, each
imported on first use (PEP 562): ``import kvstress`` is instant, so the command line can take
over Ctrl-C before torch loads, and ``kvstress --version`` does not wait for it.
"""

import sys as _sys
import types as _types
import typing as _typing
from importlib import import_module as _import_module

if _typing.TYPE_CHECKING:
    from kvstress._errors import InvalidTransition as InvalidTransition
    from kvstress._errors import PoolExhausted as PoolExhausted
    from kvstress._violation import INVARIANTS as INVARIANTS
    from kvstress._violation import BlockRecord as BlockRecord
    from kvstress._violation import InvariantViolation as InvariantViolation
    from kvstress._violation import Operation as Operation
    from kvstress.audit import AsyncAuditedPool as AsyncAuditedPool
    from kvstress.audit import AuditedBlock as AuditedBlock
    from kvstress.audit import AuditedPool as AuditedPool
    from kvstress.audit import audit as audit
    from kvstress.bench import LoadSpec as LoadSpec
    from kvstress.bench import OverloadPolicy as OverloadPolicy
    from kvstress.bench import WorkloadConfig as WorkloadConfig
    from kvstress.bench import WorkloadReport as WorkloadReport
    from kvstress.bench import run_workload as run_workload
    from kvstress.capacity import CapacityPlan as CapacityPlan
    from kvstress.capacity import ModelCard as ModelCard
    from kvstress.capacity import list_cards as list_cards
    from kvstress.capacity import load_card as load_card
    from kvstress.capacity import plan as plan
    from kvstress.capacity import pool_for_model as pool_for_model
    from kvstress.checkers import TimingPolicy as TimingPolicy
    from kvstress.explorer import Explored as Explored
    from kvstress.explorer import explore as explore
    from kvstress.harness import PoolDriver as PoolDriver
    from kvstress.harness import PoolSetupError as PoolSetupError
    from kvstress.machines import PoolMachine as PoolMachine
    from kvstress.machines import pool_machine as pool_machine
    from kvstress.paged import BlockManager as BlockManager
    from kvstress.paged import BlockTable as BlockTable
    from kvstress.paged import Degradation as Degradation
    from kvstress.paged import PagingPolicy as PagingPolicy
    from kvstress.paged import PrefixCache as PrefixCache
    from kvstress.paged import paged_machine as paged_machine
    from kvstress.pool import AsyncBlockPool as AsyncBlockPool
    from kvstress.pool import AsyncTieredBlockPool as AsyncTieredBlockPool
    from kvstress.pool import Block as Block
    from kvstress.pool import BlockInfo as BlockInfo
    from kvstress.pool import BlockState as BlockState
    from kvstress.pool import LeakDetection as LeakDetection
    from kvstress.pool import LeakSuspect as LeakSuspect
    from kvstress.pool import ThreadedBlockPool as ThreadedBlockPool
    from kvstress.pool import TieredBlockPool as TieredBlockPool
    from kvstress.shadow import ShadowResult as ShadowResult
    from kvstress.shadow import shadow as shadow

__version__ = "0.1.0"

_EXPORTS = {
    "InvalidTransition": "kvstress._errors",
    "PoolExhausted": "kvstress._errors",
    "INVARIANTS": "kvstress._violation",
    "BlockRecord": "kvstress._violation",
    "InvariantViolation": "kvstress._violation",
    "Operation": "kvstress._violation",
    "AsyncAuditedPool": "kvstress.audit",
    "AuditedBlock": "kvstress.audit",
    "AuditedPool": "kvstress.audit",
    "audit": "kvstress.audit",
    "LoadSpec": "kvstress.bench",
    "OverloadPolicy": "kvstress.bench",
    "WorkloadConfig": "kvstress.bench",
    "WorkloadReport": "kvstress.bench",
    "run_workload": "kvstress.bench",
    "CapacityPlan": "kvstress.capacity",
    "ModelCard": "kvstress.capacity",
    "list_cards": "kvstress.capacity",
    "load_card": "kvstress.capacity",
    "plan": "kvstress.capacity",
    "pool_for_model": "kvstress.capacity",
    "TimingPolicy": "kvstress.checkers",
    "Explored": "kvstress.explorer",
    "explore": "kvstress.explorer",
    "PoolDriver": "kvstress.harness",
    "PoolSetupError": "kvstress.harness",
    "PoolMachine": "kvstress.machines",
    "pool_machine": "kvstress.machines",
    "BlockManager": "kvstress.paged",
    "BlockTable": "kvstress.paged",
    "Degradation": "kvstress.paged",
    "PagingPolicy": "kvstress.paged",
    "PrefixCache": "kvstress.paged",
    "paged_machine": "kvstress.paged",
    "AsyncBlockPool": "kvstress.pool",
    "AsyncTieredBlockPool": "kvstress.pool",
    "Block": "kvstress.pool",
    "BlockInfo": "kvstress.pool",
    "BlockState": "kvstress.pool",
    "LeakDetection": "kvstress.pool",
    "LeakSuspect": "kvstress.pool",
    "ThreadedBlockPool": "kvstress.pool",
    "TieredBlockPool": "kvstress.pool",
    "ShadowResult": "kvstress.shadow",
    "shadow": "kvstress.shadow",
}
__all__ = sorted(_EXPORTS)
_NAMED_LIKE_THEIR_MODULE = frozenset(
    name for name, module in _EXPORTS.items() if module == f"{__name__}.{name}"
)
"""``audit`` and ``shadow``: functions named as the subpackages that define them."""


class _Package(_types.ModuleType):
    """This package: importing ``kvstress.audit`` (or ``kvstress.shadow``) does not bind the
    subpackage over the function of the same name, which ``kvstress.audit`` keeps meaning."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _NAMED_LIKE_THEIR_MODULE and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
