"""The corpus as two tuples: correct pools a harness must pass, and mutants it must catch.

Each mutant plants one bug in one of the correct pools and names, in ``expected``, the invariant
ids a good harness may report for it. Together the mutants cover every id in INVARIANTS.
"""

from __future__ import annotations

from kvstress.mutants._async_pool import AsyncConditionPool
from kvstress.mutants._batch_pools import AsyncFifoBatchPool, CondvarBatchPool
from kvstress.mutants._clh_pool import ClhQueuePool
from kvstress.mutants._condvar_pool import CondvarPool
from kvstress.mutants._mutants_async import (
    AsyncHoldTimePool,
    AsyncLockLeakPool,
    AsyncMillisecondsPool,
    AsyncRearmedTimeoutPool,
    AsyncResetAfterOfferPool,
    AsyncShieldedReleaseYieldPool,
    AsyncShieldedYieldPool,
    AsyncSilentReleasePool,
    AsyncSpinPool,
    AsyncStaleCountPool,
    AsyncStillReleasingPool,
    AsyncTakeThenYieldPool,
    AsyncTryOncePool,
    AsyncUnshieldedReleasePool,
)
from kvstress.mutants._mutants_asyncio import (
    AsyncioConditionDropsNotifyPool,
    AsyncioConditionIfNotWhilePool,
    AsyncioLockEventRearmedTimeoutPool,
    AsyncioQueueAwaitAfterGetPool,
    AsyncioSemaphoreTakeThenYieldPool,
    AsyncioSemaphoreUnusedReleasePool,
)
from kvstress.mutants._mutants_batch import (
    AsyncBatchCancelLeakPool,
    BatchPartialGrantLeakPool,
    BatchShortGrantPool,
    BatchStarvesAtExactlyNPool,
)
from kvstress.mutants._mutants_clh import ClhNoPropagatePool
from kvstress.mutants._mutants_condvar import (
    CheckThenPollPool,
    FullTimeoutEachWakePool,
    LockLeakPool,
    NoneMeansTryOncePool,
    PartialResetPool,
    PreferredBlockPool,
    ResetAfterOfferPool,
    RetainLostUpdatePool,
    SilentReleasePool,
)
from kvstress.mutants._mutants_on_demand import (
    LazyQueueMadeCountRacePool,
    LazyQueueMakerQueuesPool,
    MakerAsksOncePool,
    MakerSkipsIdlePool,
)
from kvstress.mutants._mutants_ordinary import (
    AnyioConditionNotifyWhenEmptyPool,
    AnyioLimiterPerTaskPool,
    AnyioSemaphoreResetAfterOfferPool,
    AnyioSemaphoreUnitPerReferencePool,
    AnyioStreamGiveUpForgetsPool,
    AsyncPollingUncappedPool,
    DeferredResetOfferFirstTaskPool,
    DeferredResetSilentOfferPool,
    ExecutorResetUnlockedOfferPool,
    HousekeepingReaperPool,
    HousekeepingScrubOutsideLockPool,
    ThreadConditionIfNotWhilePool,
    ThreadConditionTimedOutDropsNotifyPool,
    ThreadPollingUnlockedCheckPool,
    ThreadQueuePutBeforeResetPool,
    ThreadQueueUnlockedGuardPool,
    ThreadSemaphoreUnitBeforeQueuePool,
    TrioChannelSendBeforeResetPool,
    TrioLimiterForgetsTokenPool,
    TrioSemaphoreCheckpointAfterUnitPool,
)
from kvstress.mutants._mutants_polling import (
    ClampedReleasePool,
    CounterRacePool,
    LateZeroTestPool,
    PollingCheckThenPopPool,
    PollingResetAfterOfferPool,
    PollingRetainLostUpdatePool,
    ReservedCountPool,
    RetainFreePool,
    UncappedBackoffPool,
    ZeroBackoffPool,
    ZeroMeansForeverPool,
)
from kvstress.mutants._mutants_sharded import (
    ShardedCallerStripeLockPool,
    ShardedCountOutsideLockPool,
    ShardedListBeforeResetPool,
    ShardedNotifyBeforeListPool,
    ShardedScanThenParkPool,
)
from kvstress.mutants._mutants_treiber import TreiberLinkAfterPublishPool, TreiberPointerCasPool
from kvstress.mutants._on_demand_pools import LazyQueuePool, MakerThreadPool
from kvstress.mutants._ordinary_anyio import (
    AnyioCapacityLimiterPool,
    AnyioConditionPool,
    AnyioSemaphorePool,
    AnyioStreamPool,
)
from kvstress.mutants._ordinary_asyncio import (
    AsyncioConditionPool,
    AsyncioLockEventPool,
    AsyncioModuleConditionPool,
    AsyncioQueuePool,
    AsyncioSemaphorePool,
)
from kvstress.mutants._ordinary_background import (
    AsyncPollingPool,
    BackgroundTaskPool,
    DeferredResetTaskPool,
    DeferredResetThreadPool,
    ExecutorResetThreadPool,
    HousekeepingThreadPool,
)
from kvstress.mutants._ordinary_threads import (
    ThreadConditionPool,
    ThreadModuleConditionPool,
    ThreadPollingPool,
    ThreadQueuePool,
    ThreadSemaphorePool,
)
from kvstress.mutants._ordinary_trio import (
    TrioCapacityLimiterPool,
    TrioChannelPool,
    TrioConditionPool,
    TrioSemaphorePool,
)
from kvstress.mutants._polling_pool import PollingCasPool
from kvstress.mutants._sharded_pool import ShardedPool
from kvstress.mutants._treiber_pool import TreiberPool

ORDINARY_POOLS: tuple[type, ...] = (
    # asyncio
    AsyncioSemaphorePool,
    AsyncioQueuePool,
    AsyncioConditionPool,
    AsyncioModuleConditionPool,
    AsyncioLockEventPool,
    BackgroundTaskPool,
    DeferredResetTaskPool,
    # anyio (asyncio and trio)
    AnyioSemaphorePool,
    AnyioCapacityLimiterPool,
    AnyioConditionPool,
    AnyioStreamPool,
    AsyncPollingPool,
    # trio
    TrioSemaphorePool,
    TrioCapacityLimiterPool,
    TrioChannelPool,
    TrioConditionPool,
    # threading and queue
    ThreadSemaphorePool,
    ThreadConditionPool,
    ThreadModuleConditionPool,
    ThreadQueuePool,
    ThreadPollingPool,
    HousekeepingThreadPool,
    DeferredResetThreadPool,
    ExecutorResetThreadPool,
    # blocks made on demand: inline, or by a maker thread
    LazyQueuePool,
    MakerThreadPool,
)
"""Correct pools written the way developers write them, each on one standard primitive."""

CORRECT_POOLS: tuple[type, ...] = (
    CondvarPool,
    PollingCasPool,
    ShardedPool,
    TreiberPool,
    ClhQueuePool,
    AsyncConditionPool,
    # with acquire_many: served whenever n are free (threads), and FIFO-fair (async)
    CondvarBatchPool,
    AsyncFifoBatchPool,
    *ORDINARY_POOLS,
)


def backends_of(pool: type) -> tuple[str, ...]:
    """The backends an async corpus pool runs on (``backends``, else asyncio and trio); () for a
    threaded one."""
    import inspect

    if not inspect.iscoroutinefunction(getattr(pool, "acquire", None)):
        return ()
    return tuple(getattr(pool, "backends", ("asyncio", "trio")))


MUTANTS: tuple[type, ...] = (
    # CondvarPool (threads)
    ResetAfterOfferPool,
    PartialResetPool,
    CheckThenPollPool,
    RetainLostUpdatePool,
    PreferredBlockPool,
    FullTimeoutEachWakePool,
    SilentReleasePool,
    LockLeakPool,
    NoneMeansTryOncePool,
    # PollingCasPool (threads)
    CounterRacePool,
    ReservedCountPool,
    ClampedReleasePool,
    LateZeroTestPool,
    ZeroMeansForeverPool,
    ZeroBackoffPool,
    UncappedBackoffPool,
    RetainFreePool,
    PollingResetAfterOfferPool,
    PollingCheckThenPopPool,
    PollingRetainLostUpdatePool,
    # ShardedPool (threads, striped free lists)
    ShardedCountOutsideLockPool,
    ShardedScanThenParkPool,
    ShardedListBeforeResetPool,
    ShardedCallerStripeLockPool,
    ShardedNotifyBeforeListPool,
    # TreiberPool (threads, a lock-free stack of free blocks)
    TreiberPointerCasPool,
    TreiberLinkAfterPublishPool,
    # ClhQueuePool (threads, AQS-style queue of parked waiters)
    ClhNoPropagatePool,
    # AsyncConditionPool (anyio: asyncio and trio)
    AsyncResetAfterOfferPool,
    AsyncTakeThenYieldPool,
    AsyncShieldedYieldPool,
    AsyncUnshieldedReleasePool,
    AsyncShieldedReleaseYieldPool,
    AsyncStaleCountPool,
    AsyncSilentReleasePool,
    AsyncMillisecondsPool,
    AsyncTryOncePool,
    AsyncRearmedTimeoutPool,
    AsyncSpinPool,
    AsyncHoldTimePool,
    AsyncStillReleasingPool,
    AsyncLockLeakPool,
    # The ordinary-way pools
    AsyncioSemaphoreTakeThenYieldPool,
    AsyncioSemaphoreUnusedReleasePool,
    AsyncioQueueAwaitAfterGetPool,
    AsyncioConditionIfNotWhilePool,
    AsyncioConditionDropsNotifyPool,
    AsyncioLockEventRearmedTimeoutPool,
    AnyioSemaphoreResetAfterOfferPool,
    AnyioSemaphoreUnitPerReferencePool,
    AnyioStreamGiveUpForgetsPool,
    AnyioConditionNotifyWhenEmptyPool,
    AnyioLimiterPerTaskPool,
    TrioSemaphoreCheckpointAfterUnitPool,
    TrioChannelSendBeforeResetPool,
    TrioLimiterForgetsTokenPool,
    ThreadSemaphoreUnitBeforeQueuePool,
    ThreadConditionIfNotWhilePool,
    ThreadConditionTimedOutDropsNotifyPool,
    ThreadQueuePutBeforeResetPool,
    ThreadQueueUnlockedGuardPool,
    ThreadPollingUnlockedCheckPool,
    HousekeepingReaperPool,
    HousekeepingScrubOutsideLockPool,
    DeferredResetSilentOfferPool,
    ExecutorResetUnlockedOfferPool,
    DeferredResetOfferFirstTaskPool,
    AsyncPollingUncappedPool,
    # blocks made on demand (LazyQueuePool, MakerThreadPool)
    LazyQueueMakerQueuesPool,
    LazyQueueMadeCountRacePool,
    MakerSkipsIdlePool,
    MakerAsksOncePool,
    # acquire_many (CondvarBatchPool, AsyncFifoBatchPool)
    BatchPartialGrantLeakPool,
    BatchShortGrantPool,
    BatchStarvesAtExactlyNPool,
    AsyncBatchCancelLeakPool,
)
