"""kvstress: prove a KV-cache block pool correct under concurrency.

This module only re-exports the public API; everything is defined in private modules.
"""

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
