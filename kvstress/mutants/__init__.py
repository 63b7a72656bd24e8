"""The planted-bug corpus: correct pools of many designs, and mutants that each plant one bug.

``CORRECT_POOLS`` must pass any good harness; every class in ``MUTANTS`` must be caught with one
of the invariant ids in its ``expected``. The pools keep the kvstress pool protocol and import
nothing from kvstress but its block states and argument checks, as a user's pool would.

This module only re-exports; everything is defined in private modules.
"""

from kvstress.mutants._async_pool import AsyncConditionPool as AsyncConditionPool
from kvstress.mutants._batch_pools import AsyncFifoBatchPool as AsyncFifoBatchPool
from kvstress.mutants._batch_pools import CondvarBatchPool as CondvarBatchPool
from kvstress.mutants._block import Block as Block
from kvstress.mutants._clh_pool import ClhQueuePool as ClhQueuePool
from kvstress.mutants._condvar_pool import CondvarPool as CondvarPool
from kvstress.mutants._corpus import CORRECT_POOLS as CORRECT_POOLS
from kvstress.mutants._corpus import MUTANTS as MUTANTS
from kvstress.mutants._corpus import ORDINARY_POOLS as ORDINARY_POOLS
from kvstress.mutants._corpus import backends_of as backends_of
from kvstress.mutants._mutants_async import AsyncHoldTimePool as AsyncHoldTimePool
from kvstress.mutants._mutants_async import AsyncLockLeakPool as AsyncLockLeakPool
from kvstress.mutants._mutants_async import AsyncMillisecondsPool as AsyncMillisecondsPool
from kvstress.mutants._mutants_async import AsyncRearmedTimeoutPool as AsyncRearmedTimeoutPool
from kvstress.mutants._mutants_async import AsyncResetAfterOfferPool as AsyncResetAfterOfferPool
from kvstress.mutants._mutants_async import AsyncShieldedReleaseYieldPool as AsyncShieldedReleaseYieldPool
from kvstress.mutants._mutants_async import AsyncShieldedYieldPool as AsyncShieldedYieldPool
from kvstress.mutants._mutants_async import AsyncSilentReleasePool as AsyncSilentReleasePool
from kvstress.mutants._mutants_async import AsyncSpinPool as AsyncSpinPool
from kvstress.mutants._mutants_async import AsyncStaleCountPool as AsyncStaleCountPool
from kvstress.mutants._mutants_async import AsyncStillReleasingPool as AsyncStillReleasingPool
from kvstress.mutants._mutants_async import AsyncTakeThenYieldPool as AsyncTakeThenYieldPool
from kvstress.mutants._mutants_async import AsyncTryOncePool as AsyncTryOncePool
from kvstress.mutants._mutants_async import AsyncUnshieldedReleasePool as AsyncUnshieldedReleasePool
from kvstress.mutants._mutants_asyncio import (
    AsyncioConditionDropsNotifyPool as AsyncioConditionDropsNotifyPool,
)
from kvstress.mutants._mutants_asyncio import AsyncioConditionIfNotWhilePool as AsyncioConditionIfNotWhilePool
from kvstress.mutants._mutants_asyncio import (
    AsyncioLockEventRearmedTimeoutPool as AsyncioLockEventRearmedTimeoutPool,
)
from kvstress.mutants._mutants_asyncio import AsyncioQueueAwaitAfterGetPool as AsyncioQueueAwaitAfterGetPool
from kvstress.mutants._mutants_asyncio import (
    AsyncioSemaphoreTakeThenYieldPool as AsyncioSemaphoreTakeThenYieldPool,
)
from kvstress.mutants._mutants_asyncio import (
    AsyncioSemaphoreUnusedReleasePool as AsyncioSemaphoreUnusedReleasePool,
)
from kvstress.mutants._mutants_batch import AsyncBatchCancelLeakPool as AsyncBatchCancelLeakPool
from kvstress.mutants._mutants_batch import BatchPartialGrantLeakPool as BatchPartialGrantLeakPool
from kvstress.mutants._mutants_batch import BatchShortGrantPool as BatchShortGrantPool
from kvstress.mutants._mutants_batch import BatchStarvesAtExactlyNPool as BatchStarvesAtExactlyNPool
from kvstress.mutants._mutants_clh import ClhNoPropagatePool as ClhNoPropagatePool
from kvstress.mutants._mutants_condvar import CheckThenPollPool as CheckThenPollPool
from kvstress.mutants._mutants_condvar import FullTimeoutEachWakePool as FullTimeoutEachWakePool
from kvstress.mutants._mutants_condvar import LockLeakPool as LockLeakPool
from kvstress.mutants._mutants_condvar import NoneMeansTryOncePool as NoneMeansTryOncePool
from kvstress.mutants._mutants_condvar import PartialResetPool as PartialResetPool
from kvstress.mutants._mutants_condvar import PreferredBlockPool as PreferredBlockPool
from kvstress.mutants._mutants_condvar import ResetAfterOfferPool as ResetAfterOfferPool
from kvstress.mutants._mutants_condvar import RetainLostUpdatePool as RetainLostUpdatePool
from kvstress.mutants._mutants_condvar import SilentReleasePool as SilentReleasePool
from kvstress.mutants._mutants_on_demand import LazyQueueMadeCountRacePool as LazyQueueMadeCountRacePool
from kvstress.mutants._mutants_on_demand import LazyQueueMakerQueuesPool as LazyQueueMakerQueuesPool
from kvstress.mutants._mutants_on_demand import MakerAsksOncePool as MakerAsksOncePool
from kvstress.mutants._mutants_on_demand import MakerSkipsIdlePool as MakerSkipsIdlePool
from kvstress.mutants._mutants_ordinary import (
    AnyioConditionNotifyWhenEmptyPool as AnyioConditionNotifyWhenEmptyPool,
)
from kvstress.mutants._mutants_ordinary import AnyioLimiterPerTaskPool as AnyioLimiterPerTaskPool
from kvstress.mutants._mutants_ordinary import (
    AnyioSemaphoreResetAfterOfferPool as AnyioSemaphoreResetAfterOfferPool,
)
from kvstress.mutants._mutants_ordinary import (
    AnyioSemaphoreUnitPerReferencePool as AnyioSemaphoreUnitPerReferencePool,
)
from kvstress.mutants._mutants_ordinary import AnyioStreamGiveUpForgetsPool as AnyioStreamGiveUpForgetsPool
from kvstress.mutants._mutants_ordinary import AsyncPollingUncappedPool as AsyncPollingUncappedPool
from kvstress.mutants._mutants_ordinary import (
    DeferredResetOfferFirstTaskPool as DeferredResetOfferFirstTaskPool,
)
from kvstress.mutants._mutants_ordinary import DeferredResetSilentOfferPool as DeferredResetSilentOfferPool
from kvstress.mutants._mutants_ordinary import (
    ExecutorResetUnlockedOfferPool as ExecutorResetUnlockedOfferPool,
)
from kvstress.mutants._mutants_ordinary import HousekeepingReaperPool as HousekeepingReaperPool
from kvstress.mutants._mutants_ordinary import (
    HousekeepingScrubOutsideLockPool as HousekeepingScrubOutsideLockPool,
)
from kvstress.mutants._mutants_ordinary import ThreadConditionIfNotWhilePool as ThreadConditionIfNotWhilePool
from kvstress.mutants._mutants_ordinary import (
    ThreadConditionTimedOutDropsNotifyPool as ThreadConditionTimedOutDropsNotifyPool,
)
from kvstress.mutants._mutants_ordinary import (
    ThreadPollingUnlockedCheckPool as ThreadPollingUnlockedCheckPool,
)
from kvstress.mutants._mutants_ordinary import ThreadQueuePutBeforeResetPool as ThreadQueuePutBeforeResetPool
from kvstress.mutants._mutants_ordinary import ThreadQueueUnlockedGuardPool as ThreadQueueUnlockedGuardPool
from kvstress.mutants._mutants_ordinary import (
    ThreadSemaphoreUnitBeforeQueuePool as ThreadSemaphoreUnitBeforeQueuePool,
)
from kvstress.mutants._mutants_ordinary import (
    TrioChannelSendBeforeResetPool as TrioChannelSendBeforeResetPool,
)
from kvstress.mutants._mutants_ordinary import TrioLimiterForgetsTokenPool as TrioLimiterForgetsTokenPool
from kvstress.mutants._mutants_ordinary import (
    TrioSemaphoreCheckpointAfterUnitPool as TrioSemaphoreCheckpointAfterUnitPool,
)
from kvstress.mutants._mutants_polling import ClampedReleasePool as ClampedReleasePool
from kvstress.mutants._mutants_polling import CounterRacePool as CounterRacePool
from kvstress.mutants._mutants_polling import LateZeroTestPool as LateZeroTestPool
from kvstress.mutants._mutants_polling import PollingCheckThenPopPool as PollingCheckThenPopPool
from kvstress.mutants._mutants_polling import PollingResetAfterOfferPool as PollingResetAfterOfferPool
from kvstress.mutants._mutants_polling import PollingRetainLostUpdatePool as PollingRetainLostUpdatePool
from kvstress.mutants._mutants_polling import ReservedCountPool as ReservedCountPool
from kvstress.mutants._mutants_polling import RetainFreePool as RetainFreePool
from kvstress.mutants._mutants_polling import UncappedBackoffPool as UncappedBackoffPool
from kvstress.mutants._mutants_polling import ZeroBackoffPool as ZeroBackoffPool
from kvstress.mutants._mutants_polling import ZeroMeansForeverPool as ZeroMeansForeverPool
from kvstress.mutants._mutants_sharded import ShardedCallerStripeLockPool as ShardedCallerStripeLockPool
from kvstress.mutants._mutants_sharded import ShardedCountOutsideLockPool as ShardedCountOutsideLockPool
from kvstress.mutants._mutants_sharded import ShardedListBeforeResetPool as ShardedListBeforeResetPool
from kvstress.mutants._mutants_sharded import ShardedNotifyBeforeListPool as ShardedNotifyBeforeListPool
from kvstress.mutants._mutants_sharded import ShardedScanThenParkPool as ShardedScanThenParkPool
from kvstress.mutants._mutants_treiber import TreiberLinkAfterPublishPool as TreiberLinkAfterPublishPool
from kvstress.mutants._mutants_treiber import TreiberPointerCasPool as TreiberPointerCasPool
from kvstress.mutants._on_demand_pools import LazyQueuePool as LazyQueuePool
from kvstress.mutants._on_demand_pools import MakerThreadPool as MakerThreadPool
from kvstress.mutants._ordinary_anyio import AnyioCapacityLimiterPool as AnyioCapacityLimiterPool
from kvstress.mutants._ordinary_anyio import AnyioConditionPool as AnyioConditionPool
from kvstress.mutants._ordinary_anyio import AnyioSemaphorePool as AnyioSemaphorePool
from kvstress.mutants._ordinary_anyio import AnyioStreamPool as AnyioStreamPool
from kvstress.mutants._ordinary_asyncio import AsyncioConditionPool as AsyncioConditionPool
from kvstress.mutants._ordinary_asyncio import AsyncioLockEventPool as AsyncioLockEventPool
from kvstress.mutants._ordinary_asyncio import AsyncioModuleConditionPool as AsyncioModuleConditionPool
from kvstress.mutants._ordinary_asyncio import AsyncioQueuePool as AsyncioQueuePool
from kvstress.mutants._ordinary_asyncio import AsyncioSemaphorePool as AsyncioSemaphorePool
from kvstress.mutants._ordinary_background import AsyncPollingPool as AsyncPollingPool
from kvstress.mutants._ordinary_background import BackgroundTaskPool as BackgroundTaskPool
from kvstress.mutants._ordinary_background import DeferredResetTaskPool as DeferredResetTaskPool
from kvstress.mutants._ordinary_background import DeferredResetThreadPool as DeferredResetThreadPool
from kvstress.mutants._ordinary_background import ExecutorResetThreadPool as ExecutorResetThreadPool
from kvstress.mutants._ordinary_background import HousekeepingThreadPool as HousekeepingThreadPool
from kvstress.mutants._ordinary_threads import ThreadConditionPool as ThreadConditionPool
from kvstress.mutants._ordinary_threads import ThreadModuleConditionPool as ThreadModuleConditionPool
from kvstress.mutants._ordinary_threads import ThreadPollingPool as ThreadPollingPool
from kvstress.mutants._ordinary_threads import ThreadQueuePool as ThreadQueuePool
from kvstress.mutants._ordinary_threads import ThreadSemaphorePool as ThreadSemaphorePool
from kvstress.mutants._ordinary_trio import TrioCapacityLimiterPool as TrioCapacityLimiterPool
from kvstress.mutants._ordinary_trio import TrioChannelPool as TrioChannelPool
from kvstress.mutants._ordinary_trio import TrioConditionPool as TrioConditionPool
from kvstress.mutants._ordinary_trio import TrioSemaphorePool as TrioSemaphorePool
from kvstress.mutants._polling_pool import PollingCasPool as PollingCasPool
from kvstress.mutants._sharded_pool import ShardedPool as ShardedPool
from kvstress.mutants._treiber_pool import TreiberPool as TreiberPool
