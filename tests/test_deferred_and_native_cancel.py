"""Correct pools the harness once failed: one that finishes a release after it returned (a reset
worker offers the block), and one written on asyncio alone that is cancelled as asyncio code is.

Each correct pool here was reported by the harness before its fix (a ``lost-block`` or
``counter-mismatch`` at the first quiet check; a ``lost-block`` from a cancelled acquire); the
planted bugs beside them are still found.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any, ClassVar

import pytest

import kvstress
from kvstress.harness import PoolDriver
from kvstress.harness._scenarios import TaskCancel, speaks_anyio
from kvstress.mutants import (
    AnyioConditionPool,
    AsyncioConditionPool,
    AsyncioModuleConditionPool,
    DeferredResetOfferFirstTaskPool,
    DeferredResetSilentOfferPool,
    DeferredResetTaskPool,
    DeferredResetThreadPool,
    ThreadConditionPool,
    TrioConditionPool,
)
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler, Scheduler

DEFERRED = [DeferredResetThreadPool, DeferredResetTaskPool]


def config_for(factory: type, **options: Any) -> ScenarioConfig:
    return ScenarioConfig(factory, inspect.iscoroutinefunction(factory.acquire), **options)


# -- a pool that finishes its releases on a worker ---------------------------------------------


@pytest.mark.parametrize("factory", DEFERRED, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "scheduler", [RandomScheduler(seed=4), PCTScheduler(depth=3, seed=9)], ids=["random", "pct"]
)
def test_a_pool_that_offers_after_release_returned_is_clean(factory: type, scheduler: Scheduler) -> None:
    """Quiet checks, try-onces, linearizability and wake-ups all allow a block still on its
    way to the queue when its release has returned (they failed this pool at once before)."""
    result = search(config_for(factory), scheduler, max_executions=150, shrink=False)
    assert result.failure is None, result.failure.describe()


class SlowResetThreadPool(DeferredResetThreadPool):
    """The reset thread waits 2 ms for "the device" before it zeroes a block: on real threads
    the block is surely still on its way when the next call comes."""

    def _reset(self, block: Any) -> None:
        time.sleep(0.002)
        super()._reset(block)


@pytest.mark.parametrize("factory", [SlowResetThreadPool, DeferredResetTaskPool], ids=lambda f: f.__name__)
def test_the_sequential_driver_lets_a_deferring_pool_come_to_rest(factory: type) -> None:
    """Release then try-once at once, double release, quiet check and drain: all clean."""
    driver = PoolDriver(factory, num_blocks=2)
    try:
        for _ in range(20):
            first, second = driver.acquire("h0", 0), driver.acquire("h1", 0)
            assert first is not None and second is not None
            driver.release("h0", first)
            driver.double_release("h0", first)
            again = driver.acquire("h2", 0)  # the block may still be on its way: no finding
            driver.check_quiet()
            driver.release("h1", second)
            if again is not None:
                driver.release("h2", again)
            driver.check_quiet()
        driver.drain()
    finally:
        driver.close()


@pytest.mark.parametrize(
    ("factory", "invariants"),
    [
        (DeferredResetSilentOfferPool, ("lost-wakeup", "timeout-late")),
        (DeferredResetOfferFirstTaskPool, ("dirty-read",)),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_bugs_in_a_deferring_pool_are_still_found(factory: type, invariants: tuple[str, ...]) -> None:
    """A worker that offers without notifying, and one that offers before it zeroes."""
    result = search(config_for(factory), PCTScheduler(depth=3, seed=1), max_executions=400, shrink=False)
    assert result.failure is not None, f"not found in {result.executions} executions"
    assert result.failure.violation.invariant in invariants, result.failure.describe()


class DroppingResetPool(DeferredResetThreadPool):
    """The reset thread zeroes only every other block it is handed and forgets the rest: they
    stay RELEASING, neither held nor queued, for good."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed = 0

    def _reset_loop(self) -> None:
        while (block := self._next_reset()) is not None:
            self._handed += 1
            if self._handed % 2 == 0:
                with self._cond:
                    self._resetting -= 1
                continue  # BUG: dropped, still RELEASING
            self._reset(block)
            self._offer(block)


def test_a_block_a_deferring_pool_never_offers_is_lost() -> None:
    """Waiting for a deferring pool to come to rest is bounded: a block that never arrives is a
    lost block, found by the scenarios and by the sequential driver."""
    result = search(config_for(DroppingResetPool), RandomScheduler(seed=2), max_executions=200, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "lost-block"
    driver = PoolDriver(DroppingResetPool, num_blocks=2)
    try:
        with pytest.raises(kvstress.InvariantViolation) as caught:
            for _ in range(4):
                block = driver.acquire("h0", 0)
                assert block is not None
                driver.release("h0", block)
                driver.check_quiet()
        assert caught.value.invariant == "lost-block"
    finally:
        driver.close()


def test_the_audit_lets_a_block_be_on_its_way_back() -> None:
    """An audited deferring pool: no finding at its quiet points or at close."""
    pool = kvstress.audit(DeferredResetThreadPool(3, (2, 4)))
    for _ in range(30):
        taken = [pool.acquire(1.0) for _ in range(2)]
        for block in taken:
            pool.mark_in_use(block)
        for block in taken:
            assert pool.release(block) is True
    pool.close()


# -- cancelling a pool written on asyncio alone --------------------------------------------------


class CleanupOnCancelPool:
    """An asyncio pool whose acquire awaits a hook after taking a block and, cancelled there,
    awaits its way through giving the block back (``except CancelledError: await ...; raise``).
    Correct under asyncio's cancellation, delivered once; an anyio cancel scope re-delivers it
    into the give-back and the block is lost."""

    def __init__(self, num_blocks: int, block_shape: Any, *, dtype: Any = None, device: Any = None) -> None:
        shape = (block_shape,) if isinstance(block_shape, int) else tuple(block_shape)
        self._pool = kvstress.mutants.AsyncioConditionPool(num_blocks, shape)
        self.num_blocks = num_blocks
        self._lock = asyncio.Lock()

    async def acquire(self, timeout: float | None = None) -> Any:
        block = await self._pool.acquire(timeout)
        if block is None:
            return None
        try:
            await asyncio.sleep(0)  # an async hook: metrics, a trace span
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # flush the hook, then give the block back
            await self._pool.release(block)
            raise
        return block

    def mark_in_use(self, block: Any) -> None:
        self._pool.mark_in_use(block)

    def retain(self, block: Any) -> None:
        self._pool.retain(block)

    async def release(self, block: Any) -> bool:
        return await self._pool.release(block)

    def free_count(self) -> int:
        return self._pool.free_count()

    def free_ids(self) -> list[int]:
        return self._pool.free_ids()


def test_a_pool_on_asyncio_alone_is_cancelled_once() -> None:
    """A cleanup that awaits inside ``except CancelledError`` keeps the protocol on asyncio:
    scenarios with cancel steps find nothing (an anyio cancel scope lost its block before)."""
    assert not speaks_anyio(CleanupOnCancelPool(1, 2))
    for scheduler in (RandomScheduler(seed=5), PCTScheduler(depth=3, seed=6)):
        result = search(config_for(CleanupOnCancelPool), scheduler, max_executions=200, shrink=False)
        assert result.failure is None, result.failure.describe()


def test_anyio_pools_are_still_cancelled_by_cancel_scopes() -> None:
    """A pool whose code uses anyio is cancelled as anyio code is; one on asyncio alone is not."""
    assert speaks_anyio(AnyioConditionPool(1, 2)) and speaks_anyio(kvstress.AsyncBlockPool(1, 2))
    assert not speaks_anyio(AsyncioConditionPool(1, 2))


def test_task_cancel_absorbs_its_own_cancellation_only() -> None:
    """TaskCancel cancels the task inside it once and absorbs exactly that; a cancel before the
    block is entered lands as it enters; one after it is left does nothing; a cancellation
    from elsewhere still propagates."""

    async def main() -> list[str]:
        seen: list[str] = []
        scope = TaskCancel()

        async def inside() -> None:
            with scope:
                await asyncio.sleep(10)
                seen.append("not cancelled")
            seen.append(f"absorbed, cancelling={asyncio.current_task().cancelling()}")  # type: ignore[union-attr]

        task = asyncio.ensure_future(inside())
        await asyncio.sleep(0)
        scope.cancel()
        scope.cancel()  # once only
        await task
        early = TaskCancel()
        early.cancel()
        with early:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append("early")
                raise
        late = TaskCancel()
        with late:
            pass
        late.cancel()
        await asyncio.sleep(0)
        seen.append("late is a no-op")
        outer = asyncio.ensure_future(_outer_cancel_propagates())
        await asyncio.sleep(0)
        outer.cancel()
        try:
            await outer
        except asyncio.CancelledError:
            seen.append("outer propagated")
        return seen

    assert asyncio.run(main()) == [
        "absorbed, cancelling=0",
        "early",
        "late is a no-op",
        "outer propagated",
    ]


async def _outer_cancel_propagates() -> None:
    with TaskCancel():
        await asyncio.sleep(10)


# -- the controlled threads' end ----------------------------------------------------------------


def test_threads_parked_on_one_condition_unwind_quietly_when_the_run_ends() -> None:
    """Two daemon workers of a pool: one parked in ``Condition.wait``, the other holding that
    condition's lock while it waits for an event. As the run ends both unwind; the first
    cannot take the lock back, and its ``with`` no longer releases the lock the second holds
    (which then failed the run with "release unlocked lock")."""
    from kvstress.controlled import run_threads

    def main() -> str:
        cond, gate = threading.Condition(threading.Lock()), threading.Event()

        def waiter() -> None:
            with cond:
                cond.wait()

        def holder() -> None:
            time.sleep(0.001)  # after the waiter has parked
            with cond:
                gate.wait()

        threading.Thread(target=waiter, daemon=True).start()
        threading.Thread(target=holder, daemon=True).start()
        time.sleep(0.01)
        return "done"

    for seed in range(5):
        assert run_threads(main, RandomScheduler(seed=seed), modules=[__name__]) == "done"


# -- a release cancelled after it took effect --------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_release_cancelled_after_its_offer_is_not_taken_back(seed: int) -> None:
    """TrioConditionPool queues the block, then awaits the condition's lock to notify: a
    release cancelled there took effect, and a peer may hold the block by the time the
    harness looks. The harness no longer gives the block back to the canceller (which it
    did when the block looked held by one reference: a false ``shared-block``, within 140
    executions on each of these seeds)."""
    config = ScenarioConfig(TrioConditionPool, True, backend="trio")
    result = search(config, RandomScheduler(seed=seed), max_executions=200, shrink=False)
    assert result.failure is None, result.failure.describe()


# -- handles whose fields are the pool's own code ------------------------------------------------


class _Lease:
    """A per-tenancy handle whose state and refcount are properties: reading them runs the
    pool's code, where a controlled run can switch threads."""

    reads: ClassVar[list[tuple[str, ...]]] = []
    probe: ClassVar[Any] = None

    def __init__(self, block: Any) -> None:
        self._block, self.id, self.data = block, block.id, block.data

    @property
    def state(self) -> Any:
        return self._block.state

    @property
    def refcount(self) -> int:
        if _Lease.probe is not None:
            _Lease.reads.append(_Lease.probe())
        return int(self._block.refcount)


class LeasePool:
    """ThreadConditionPool's blocks behind a fresh lease per tenancy."""

    def __init__(self, num_blocks: int, block_shape: Any, **options: Any) -> None:
        self._pool = kvstress.mutants.ThreadConditionPool(num_blocks, block_shape, **options)
        self.num_blocks = num_blocks
        self._leases: dict[int, _Lease] = {}

    def acquire(self, timeout: float | None = None) -> _Lease | None:
        block = self._pool.acquire(timeout)
        if block is None:
            return None
        lease = self._leases[block.id] = _Lease(block)
        return lease

    def mark_in_use(self, lease: _Lease) -> None:
        self._pool.mark_in_use(lease._block)

    def retain(self, lease: _Lease) -> None:
        self._pool.retain(lease._block)

    def release(self, lease: _Lease) -> bool:
        return self._pool.release(lease._block)

    def free_count(self) -> int:
        return self._pool.free_count()

    def free_ids(self) -> list[int]:
        return self._pool.free_ids()


def test_a_share_reads_the_refcount_before_the_peer_may_release() -> None:
    """After a retain, the harness reads the refcount before its ledger gives the peer the
    reference: a handle property is pool code, where the peer could otherwise run, release its
    share, and be blamed as a lost refcount update (a false ``refcount`` finding on this pool
    under PCT before)."""
    driver = PoolDriver(LeasePool, num_blocks=2)
    try:
        block = driver.acquire("h0", 0)
        assert block is not None
        _Lease.reads.clear()
        _Lease.probe = lambda: driver.ledger.holders_of(block)
        driver.share("h0", block, "h1")
        assert _Lease.reads and all("h1" not in holders for holders in _Lease.reads), _Lease.reads
    finally:
        _Lease.probe = None
        driver.close()


# -- explored tests of code that imports its pool ------------------------------------------------


def _three_workers(pool: Any, rounds: int = 2) -> None:
    """Three threads share two blocks; each waits up to 1 s for one: never in vain."""

    def worker() -> None:
        for _ in range(rounds):
            block = pool.acquire(1.0)
            assert block is not None, "acquire(1.0) gave up on a pool whose blocks all come back"
            pool.mark_in_use(block)
            pool.release(block)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_an_explored_thread_test_makes_the_pool_it_imports_cooperative() -> None:
    """The pool's class comes from another module, not named in ``modules``: its Condition,
    made while the test runs, is still the baton's (a real one held the baton while its waiter
    waited out the timeout alone: acquire answered None at schedule 12)."""
    kvstress.explore(
        lambda: _three_workers(ThreadConditionPool(2, (2, 4))), schedules=150, strategy="pct", seed=1
    )


def test_an_audited_deferring_pool_passes_an_explored_thread_test() -> None:
    """The audit's quiet points read a pool whose reset thread may be offering a block right
    then: the block counts as on its way back, and the counter is judged only at rest (a false
    ``lost-block``, then ``counter-mismatch``, within 12 schedules before)."""

    def body() -> None:
        pool = kvstress.audit(DeferredResetThreadPool(2, (2, 4)))
        _three_workers(pool)
        pool.close()

    kvstress.explore(body, schedules=300, strategy="pct", seed=1)


def test_an_explored_async_test_gives_an_imported_pools_module_fresh_primitives() -> None:
    """The pool's module made its ``asyncio.Condition`` at import, and the module is not named
    in ``modules``: each schedule's loop still gets a fresh copy (schedule 2 failed with "bound
    to a different event loop" before)."""

    async def body() -> None:
        pool = AsyncioModuleConditionPool(2, (2, 4))

        async def worker() -> None:
            for _ in range(2):
                block = await pool.acquire(1.0)
                assert block is not None
                await asyncio.sleep(0.01)  # held while the others wait on the condition
                await pool.release(block)

        await asyncio.gather(worker(), worker(), worker())

    kvstress.explore(body, schedules=50, strategy="random", seed=2)
