"""Controlled scenarios: correct pools stay clean, planted bugs are found, failures replay exactly."""

from __future__ import annotations

import gc
import inspect
import warnings
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pools import broken
from pools._simple import SimpleAsyncPool, SimpleThreadedPool
from pools.dying_task import DyingOfferTaskPool
from pools.handoff_asyncio import (
    ExecutorResetHandoffPool,
    ExecutorSkipsResetPool,
    ThreadCoroutineResetHandoffPool,
    ThreadResetHandoffPool,
    ThreadSkipsResetPool,
    ThreadSleepsLosesBlockPool,
    ThreadSleepsResetHandoffPool,
    ThreadSlowResetHandoffPool,
)
from pools.own_thread_raises import ResetThreadRaisesPool
from pools.self_pipe import (
    EdgeEpollPool,
    EpollPool,
    PollObjectPool,
    SelectCallPool,
    SelfPipeLateRegisterPool,
    SelfPipePool,
    SocketPairLateRegisterPool,
    SocketPairPool,
)
from pools.tiny import TinyCheckThenPollPool, TinyPool, TinyResetAfterOfferPool
from pools.trio_reset_thread import (
    TrioNappingResetThreadPool,
    TrioResetThreadPool,
    TrioResetThreadWakesNoonePool,
    TrioSlowHandBackPool,
    TrioSlowResetLosesBlockPool,
    TrioSlowResetThreadPool,
    TrioSpinningLosesBlockPool,
)

from kvstress import AsyncBlockPool, BlockState, ThreadedBlockPool
from kvstress.controlled._foreign import watching_possible
from kvstress.mutants import AnyioConditionPool
from kvstress.scenarios import ScenarioConfig, generate, replay, run_execution, search
from kvstress.schedulers import DFSScheduler, PCTScheduler, RandomScheduler, Scheduler

CORRECT = [ThreadedBlockPool, SimpleThreadedPool, AsyncBlockPool, SimpleAsyncPool]

# What the scenarios never do, by design: misuse and double release are the sequential state
# machines' job (a concurrent double release cannot be told from a release of the next tenant).
OUTSIDE_SCENARIOS = {
    broken.RetainFreePool,
    broken.MarkAnyPool,
    broken.DoubleReleaseTruePool,
    broken.DoubleReleaseOfferPool,
}


def config_for(factory: type, **options: object) -> ScenarioConfig:
    return ScenarioConfig(factory, inspect.iscoroutinefunction(factory.acquire), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("factory", CORRECT, ids=lambda f: f.__name__)
def test_correct_pools_are_clean_under_random_schedules(factory: type) -> None:
    """Seeded random interleavings of generated scenarios find nothing on a correct pool."""
    result = search(config_for(factory), RandomScheduler(seed=11), max_executions=120)
    assert result.failure is None, result.failure.describe()
    assert result.executions == 120


@pytest.mark.parametrize("factory", CORRECT, ids=lambda f: f.__name__)
def test_correct_pools_are_clean_under_pct(factory: type) -> None:
    """PCT (depth 3) finds nothing on a correct pool either."""
    result = search(config_for(factory), PCTScheduler(depth=3, seed=5), max_executions=80)
    assert result.failure is None, result.failure.describe()


@pytest.mark.parametrize(
    "factory",
    [p for p in broken.BROKEN_POOLS if p not in OUTSIDE_SCENARIOS],
    ids=lambda f: f.__name__,
)
def test_planted_bugs_are_found_with_their_invariant(factory: type) -> None:
    """Every planted bug the scenarios exercise is found, and named by its invariant id."""
    result = search(config_for(factory), RandomScheduler(seed=3), max_executions=300, shrink=False)
    assert result.failure is not None, f"{factory.__name__} not found in {result.executions} executions"
    expected = factory.expected if isinstance(factory.expected, tuple) else (factory.expected,)
    assert result.failure.violation.invariant in expected, result.failure.describe()


@pytest.mark.parametrize(
    "factory", [TinyResetAfterOfferPool, broken.AsyncNoResetPool], ids=lambda f: f.__name__
)
def test_same_seed_same_interleaving_same_failure(factory: type) -> None:
    """Two searches with one seed fail identically, and the schedule string replays it exactly."""
    config = config_for(factory)
    first = search(config, RandomScheduler(seed=21), max_executions=1_000).failure
    second = search(config, RandomScheduler(seed=21), max_executions=1_000).failure
    assert first is not None and second is not None
    assert str(first.schedule) == str(second.schedule)
    assert [op.describe() for op in first.history] == [op.describe() for op in second.history]
    again = replay(config, str(first.schedule))
    assert again is not None and again.violation.invariant == first.violation.invariant
    assert [op.describe() for op in again.history] == [op.describe() for op in first.history]


@pytest.mark.parametrize(
    ("factory", "invariant"),
    [(TinyResetAfterOfferPool, "dirty-read"), (TinyCheckThenPollPool, "crash")],
    ids=["reset-after-offer", "check-then-poll"],
)
def test_scheduler_finds_small_pool_races_in_few_executions(factory: type, invariant: str) -> None:
    """PCT finds the two classic races of a tiny pool within a few dozen controlled executions."""
    result = search(config_for(factory), PCTScheduler(depth=3, seed=1), max_executions=50)
    assert result.failure is not None and result.failure.violation.invariant == invariant
    assert result.executions <= 50


def test_dfs_proves_a_tiny_pool_clean_within_its_bound() -> None:
    """Bounded exhaustive search runs every interleaving within one preemption and finds nothing."""
    config = config_for(TinyPool, workers=2, length=3, num_blocks=1)
    result = search(config, DFSScheduler(preemption_bound=1, seed=2), max_executions=5_000)
    assert result.exhausted and result.failure is None
    assert result.executions > 10  # the proof covered real choices, not one path


def test_dfs_finds_the_planted_race_in_the_same_scenario() -> None:
    """The same bounded search, over the same scenario, fails on the reset-after-offer variant."""
    config = config_for(TinyResetAfterOfferPool, workers=2, length=3, num_blocks=1)
    result = search(config, DFSScheduler(preemption_bound=1, seed=2), max_executions=5_000)
    assert result.failure is not None and result.failure.violation.invariant == "dirty-read"


def test_shrunk_failure_keeps_its_invariant_and_replays() -> None:
    """Shrinking never adds switches, and its result still replays to the same violation."""
    config = config_for(TinyResetAfterOfferPool)
    raw = search(config, RandomScheduler(seed=4), max_executions=1_000, shrink=False).failure
    shrunk = search(config, RandomScheduler(seed=4), max_executions=1_000).failure
    assert raw is not None and shrunk is not None
    assert shrunk.switches <= raw.switches
    again = replay(config, shrunk.schedule)
    assert again is not None and again.violation.invariant == raw.violation.invariant


def test_failure_description_has_programs_table_and_schedule() -> None:
    """describe() gives the violation, the programs, the table with the failing row, the schedule."""
    failure = search(
        config_for(TinyResetAfterOfferPool), PCTScheduler(depth=3, seed=1), max_executions=50
    ).failure
    assert failure is not None
    text = failure.describe()
    assert text.startswith("[dirty-read]")
    assert "programs:\n  b0: acquire(" in text
    assert "<- failed here" in text
    assert f"schedule: {failure.schedule}" in text


def test_a_deadlocking_pool_is_a_hang_with_the_wait_for_graph() -> None:
    """A pool that never releases its lock is a hang, and the message names who waits for whom."""
    failure = search(config_for(broken.DeadlockPool), RandomScheduler(seed=2), max_executions=20).failure
    assert failure is not None and failure.violation.invariant == "hang"
    assert "waits for Lock#" in failure.violation.message


def test_replay_of_a_schedule_from_another_program_diverges() -> None:
    """A schedule recorded on one scenario configuration does not silently replay another."""
    from kvstress.schedulers import ScheduleDivergence

    failure = search(
        config_for(TinyResetAfterOfferPool), PCTScheduler(depth=3, seed=1), max_executions=50
    ).failure
    assert failure is not None
    with pytest.raises(ScheduleDivergence):
        replay(config_for(TinyPool, workers=1, length=1), failure.schedule)


def test_generated_programs_start_with_an_acquire_and_cancel_only_when_async() -> None:
    """Programs open with an acquire (or a shared opening); cancel steps appear only when allowed."""
    import random

    threaded = generate(random.Random(1), workers=3, length=40, cancel=False)
    assert threaded.programs[0][0][0] == "acquire"
    # The others start with an acquire too, or wait for the block worker 0 shares (see below).
    assert all(p[0][0] in ("acquire", "wait") for p in threaded.programs)
    assert not any(kind == "cancel" for p in threaded.programs for kind, _ in p)
    both = generate(random.Random(1), workers=3, length=40, cancel=True)
    assert any(kind == "cancel" for p in both.programs for kind, _ in p)


@pytest.mark.parametrize(
    ("options", "word"),
    [({"workers": 0}, "workers"), ({"length": 0}, "length")],
)
def test_generate_rejects_bad_sizes(options: dict[str, int], word: str) -> None:
    """generate() names the bad argument."""
    import random

    arguments = {"workers": 2, "length": 3, **options}
    with pytest.raises(ValueError, match=word):
        generate(random.Random(0), cancel=False, **arguments)


def test_search_needs_a_limit() -> None:
    """search() without max_executions or budget_s is a ValueError, not an endless search."""
    with pytest.raises(ValueError, match="max_executions or budget_s"):
        search(config_for(TinyPool), RandomScheduler(seed=0))


ASYNC_BROKEN = [p for p in broken.BROKEN_POOLS if inspect.iscoroutinefunction(p.acquire)]


@pytest.mark.parametrize("factory", [AsyncBlockPool, SimpleAsyncPool], ids=lambda f: f.__name__)
def test_correct_async_pools_are_clean_on_trio(factory: type) -> None:
    """Seeded trio runs of generated scenarios find nothing on a correct async pool."""
    result = search(config_for(factory, backend="trio"), RandomScheduler(seed=11), max_executions=100)
    assert result.failure is None, result.failure.describe()


class WorkerThreadResetPool(AnyioConditionPool):
    """Correct on trio: a released block is zeroed on a worker thread (``anyio.to_thread``),
    shielded, and only then queued."""

    backends = ("trio",)  # on asyncio, Task.cancel() goes through anyio's shield

    async def release(self, block: Any) -> bool:
        with anyio.CancelScope(shield=True):
            async with self._cond:
                if not self._last_reference(block):
                    return False
            await anyio.to_thread.run_sync(block.data.zero_)
            async with self._cond:
                block.state = BlockState.FREE
                self._free.append(block)
                self._cond.notify()
        return True


@pytest.mark.parametrize(
    "scheduler", [RandomScheduler(seed=5), PCTScheduler(depth=3, seed=5)], ids=["random", "pct"]
)
def test_waits_for_worker_threads_are_no_hang_on_trio(scheduler: Scheduler) -> None:
    """A pool that waits for a worker thread in its release is clean on trio: while the thread
    works the run is not idle, and the virtual clock does not jump to a deadline."""
    result = search(config_for(WorkerThreadResetPool, backend="trio"), scheduler, max_executions=150)
    assert result.failure is None, result.failure.describe()


@pytest.mark.parametrize(
    "scheduler", [RandomScheduler(seed=5), PCTScheduler(depth=3, seed=5)], ids=["random", "pct"]
)
def test_a_reset_on_the_pools_own_executor_is_waited_for(scheduler: Scheduler) -> None:
    """A pool that zeroes a released block on its own ``ThreadPoolExecutor`` and offers it back
    with ``call_soon_threadsafe`` is clean: the loop waits for the submitted work before virtual
    time moves (it reported the block lost at a quiet check). Without the reset it is found."""
    result = search(config_for(ExecutorResetHandoffPool), scheduler, max_executions=150)
    assert result.failure is None, result.failure.describe()
    result = search(config_for(ExecutorSkipsResetPool), scheduler, max_executions=300, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "dirty-read"


CLOSED: list[str] = []


class _ClosingThreaded(SimpleThreadedPool):
    def close(self) -> None:
        CLOSED.append("threads")


class _ClosingAsync(SimpleAsyncPool):
    async def close(self) -> None:
        CLOSED.append("async")


class _CloseTakesATimeout(SimpleThreadedPool):
    def close(self, timeout: float) -> None:  # not the protocol's close(): never called
        CLOSED.append("timeout")


class _CloseRaises(SimpleThreadedPool):
    def close(self) -> None:
        raise RuntimeError("close failed")


@pytest.mark.parametrize(
    ("factory", "said"),
    [(_ClosingThreaded, "threads"), (_ClosingAsync, "async"), (_CloseTakesATimeout, None)],
)
def test_a_run_ends_with_the_pools_optional_close(factory: type, said: str | None) -> None:
    """Every execution ends by calling the pool's ``close()`` (a plain call or a coroutine), once:
    where a pool stops a thread of its own. A ``close`` that needs arguments is another kind,
    and is left alone."""
    CLOSED.clear()
    result = search(config_for(factory), RandomScheduler(seed=2), max_executions=5)
    assert result.failure is None, result.failure.describe()
    assert ([said] * 5 if said else []) == CLOSED


def test_a_close_that_raises_is_a_crash() -> None:
    result = search(config_for(_CloseRaises), RandomScheduler(seed=2), max_executions=5, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "crash"
    assert "close() raised RuntimeError: close failed" in result.failure.violation.message


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
@pytest.mark.parametrize(
    "factory", [ThreadResetHandoffPool, ThreadCoroutineResetHandoffPool, ThreadSleepsResetHandoffPool]
)
@pytest.mark.parametrize(
    "scheduler", [RandomScheduler(seed=3), PCTScheduler(depth=3, seed=3)], ids=["random", "pct"]
)
def test_a_reset_thread_of_the_pools_own_is_waited_for(factory: type, scheduler: Scheduler) -> None:
    """A pool whose own reset thread, fed by a queue, zeroes a released block and hands it back
    with ``call_soon_threadsafe`` or ``run_coroutine_threadsafe`` is clean: an idle loop waits
    for a thread it saw started while the thread is at work (it moved virtual time past a quiet
    check, and reported the block lost in milliseconds). Without the reset it is found."""
    result = search(config_for(factory), scheduler, max_executions=150)
    assert result.failure is None, result.failure.describe()


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
@pytest.mark.parametrize(
    "factory", [TrioResetThreadPool, TrioNappingResetThreadPool], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_reset_thread_of_a_trio_pools_own_is_waited_for(factory: type, seed: int) -> None:
    """A thread of the pool's own that zeroes a released block and hands it back with
    ``run_sync_soon`` is waited for while the block reads RELEASING (``expect_offer``): the run's
    clock jumped to a waiter's timeout, and past settle, without it, on every seed."""
    result = search(config_for(factory, backend="trio"), RandomScheduler(seed=seed), max_executions=60)
    assert result.failure is None, result.failure.describe()


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
@pytest.mark.parametrize(
    ("factory", "backend"),
    [
        (ThreadSlowResetHandoffPool, "asyncio"),
        (TrioSlowResetThreadPool, "trio"),
        (TrioSlowHandBackPool, "trio"),
    ],
)
def test_a_reset_thread_at_work_past_settle_is_waited_for(factory: type, backend: str) -> None:
    """A thread of the pool's own that works (runnable, or running) longer than the checks'
    settle time before it offers a released block back is waited for while it works, the run's
    clock following real time (and the checks excusing it): on trio the offer's wait ended with
    settle, or as the thread marked the block FREE before it handed it back, the clock jumped
    on, and a correct pool was reported ``lost-block`` (its napping twin once in a CI run, its
    thread starved of a core)."""
    result = search(config_for(factory, backend=backend), RandomScheduler(seed=0), max_executions=2)
    assert result.failure is None, result.failure.describe()


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
@pytest.mark.parametrize("factory", [TrioSlowResetLosesBlockPool, TrioSpinningLosesBlockPool])
def test_a_late_offer_is_waited_for_only_while_the_thread_works(factory: type) -> None:
    """The wait for a late offer ends when the pool's thread stops working (or has worked for
    ``SUBMITTED_WAIT_S``): a thread that drops the block is still found."""
    config = config_for(factory, backend="trio")
    TrioSpinningLosesBlockPool.stop_spinning.clear()
    try:
        result = search(config, RandomScheduler(seed=0), max_executions=2, shrink=False)
    finally:
        TrioSpinningLosesBlockPool.stop_spinning.set()  # no thread left spinning beside later tests
    assert result.failure is not None
    assert result.failure.violation.invariant in factory.expected, result.failure.describe()


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
def test_a_trio_reset_thread_whose_offer_wakes_no_one_is_a_lost_wakeup() -> None:
    result = search(
        config_for(TrioResetThreadWakesNoonePool, backend="trio"),
        RandomScheduler(seed=0),
        max_executions=300,
        shrink=False,
    )
    assert result.failure is not None and result.failure.violation.invariant == "lost-wakeup"


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
def test_a_reset_thread_that_sleeps_with_a_block_and_never_offers_it_is_found() -> None:
    """The wait for an offer on its way (``expect_offer``) ends with the checks' settle time."""
    result = search(
        config_for(ThreadSleepsLosesBlockPool), RandomScheduler(seed=3), max_executions=50, shrink=False
    )
    assert result.failure is not None
    assert result.failure.violation.invariant in ("lost-block", "lost-wakeup"), result.failure.describe()


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
def test_a_reset_thread_that_skips_the_reset_is_found() -> None:
    result = search(
        config_for(ThreadSkipsResetPool), RandomScheduler(seed=3), max_executions=300, shrink=False
    )
    assert result.failure is not None and result.failure.violation.invariant == "dirty-read"


@pytest.mark.parametrize(
    "factory",
    [SelfPipePool, SelectCallPool, PollObjectPool, EpollPool, EdgeEpollPool, SocketPairPool],
    ids=lambda f: f.__name__,
)
@pytest.mark.parametrize(
    "scheduler", [RandomScheduler(seed=5), PCTScheduler(depth=3, seed=5)], ids=["random", "pct"]
)
def test_waits_on_a_pipe_are_cooperative(factory: type, scheduler: Scheduler) -> None:
    """Waiters that park on a pipe of their own (``selectors``, ``select.select``, a ``poll`` or
    an ``epoll`` object, or in ``recv`` on a socket pair with the socket's timeout), woken by a
    byte a release writes, are clean: the wait polls its descriptor at each decision and times
    out on virtual time (it was a real syscall, and a correct pool a busy-wait). A waiter that
    registers its pipe too late is found."""
    result = search(config_for(factory), scheduler, max_executions=100)
    assert result.failure is None, result.failure.describe()


@pytest.mark.parametrize(
    "factory", [SelfPipeLateRegisterPool, SocketPairLateRegisterPool], ids=lambda f: f.__name__
)
def test_a_pipe_registered_too_late_is_a_lost_wakeup(factory: type) -> None:
    found = [
        search(config_for(factory), RandomScheduler(seed=seed), max_executions=300, shrink=False)
        for seed in range(3)
    ]
    assert all(result.failure is not None for result in found)
    assert {result.failure.violation.invariant for result in found if result.failure} <= {
        "lost-wakeup",
        "lost-block",
    }


@pytest.mark.parametrize("factory", ASYNC_BROKEN, ids=lambda f: f.__name__)
def test_planted_async_bugs_are_found_on_trio(factory: type) -> None:
    """Every planted async bug is found on trio too, including a shielded wait that never ends."""
    result = search(
        config_for(factory, backend="trio"), RandomScheduler(seed=3), max_executions=300, shrink=False
    )
    assert result.failure is not None
    expected = factory.expected if isinstance(factory.expected, tuple) else (factory.expected,)
    assert result.failure.violation.invariant in expected, result.failure.describe()


def test_a_trio_run_past_its_time_limit_names_where_its_workers_wait() -> None:
    """As the asyncio loop's deadlock message does: each worker still waiting, and the line of
    the pool it waits at (a blind user's trio hang named no task and no line)."""
    from dataclasses import replace

    from kvstress.scenarios._motifs import SETTLE, _of

    scenario = _of(
        [("acquire", 0.0), ("acquire", 0.0), ("sleep", SETTLE), ("release", None)],
        [("sleep", SETTLE / 2), ("acquire", None)],
    )
    config = replace(config_for(broken.AsyncNoNotifyPool, backend="trio"), scenario=scenario)
    result = search(config, RandomScheduler(seed=0), max_executions=5, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "hang"
    message = result.failure.violation.message
    assert "tasks wait for something that never comes ('b1' at _simple.py:" in message, message
    assert "`await woken.wait()`)" in message, message


def test_an_abandoned_trio_run_stops_burning_a_core() -> None:
    """A run blocked for good behind a shielded wait is abandoned on its thread; that thread
    then sleeps. It used to spin in trio's autojumper for the rest of the process, slowing every
    later run, and its draws from trio's RNG broke the replay of later trio schedules."""
    import time

    config = config_for(broken.AsyncHangPool, backend="trio")
    result = search(config, RandomScheduler(seed=3), max_executions=300, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "hang"
    time.sleep(0.05)  # the abandoned thread reaches its next idle wait
    cpu0 = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - cpu0 < 0.1


def test_a_trio_failure_replays_from_its_schedule() -> None:
    """On trio the schedule holds one seed, and replaying it repeats the run exactly."""
    config = config_for(broken.AsyncCancelLeakPool, backend="trio")
    failure = search(config, RandomScheduler(seed=5), max_executions=300).failure
    assert failure is not None
    again = replay(config, str(failure.schedule))
    assert again is not None
    assert [op.describe() for op in again.history] == [op.describe() for op in failure.history]


def test_config_rejects_bad_arguments() -> None:
    """ScenarioConfig names a bad backend, block count or shape."""
    with pytest.raises(ValueError, match="backend"):
        ScenarioConfig(AsyncBlockPool, True, backend="curio")
    with pytest.raises(ValueError, match="num_blocks"):
        ScenarioConfig(AsyncBlockPool, True, num_blocks=0)
    with pytest.raises(ValueError, match="block_shape"):
        ScenarioConfig(AsyncBlockPool, True, block_shape=(0,))


def test_hypothesis_drives_the_thread_baton_and_its_failure_replays() -> None:
    """Schedules drawn by Hypothesis run threads too; the shrunk failing one replays exactly."""
    from hypothesis import HealthCheck, given, settings

    from kvstress._violation import InvariantViolation
    from kvstress.schedulers import HypothesisScheduler, hypothesis_schedulers

    config = config_for(TinyCheckThenPollPool, workers=2, length=4)
    failing = []

    @settings(
        max_examples=200,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(hypothesis_schedulers())
    def check(scheduler: HypothesisScheduler) -> None:
        record = run_execution(config, scheduler)
        if record.failure is not None:
            failing.append(scheduler.schedule())
            raise record.failure

    with pytest.raises(InvariantViolation) as caught:
        check()
    assert caught.value.invariant == "crash"
    again = replay(config, failing[-1])
    assert again is not None and again.violation.invariant == "crash"


def test_some_scenarios_open_with_one_block_shared_by_all() -> None:
    """About a quarter open with worker 0 sharing one block with every other, who wait for it
    and then release it: at once (racing worker 0's next share), or all at one instant."""
    import random

    from kvstress.scenarios._programs import HANDOFF_WAIT, SHARED_SHARE

    rng = random.Random(3)
    drawn = [generate(rng, workers=3, length=6, cancel=False) for _ in range(400)]
    shared = [s for s in drawn if s.programs[0][:3] == (("acquire", 0.0), ("share", 1), ("share", 2))]
    assert abs(len(shared) / len(drawn) - SHARED_SHARE) < 0.08
    assert all(s.programs[1][0] == ("wait", HANDOFF_WAIT) for s in shared)
    at_once = [s for s in shared if s.programs[1][1] == ("release", None)]
    together = [s for s in shared if s.programs[1][1][0] == "sleep" and s.programs[1][2] == ("release", None)]
    assert len(at_once) + len(together) == len(shared) and at_once and together


def test_a_peer_of_the_shared_opening_releases_only_once_it_holds_the_block() -> None:
    """Whatever the schedule, a peer parked on its hand-off releases the shared block: the run
    ends with the block FREE and every peer's release in the history."""
    from kvstress.mutants import CondvarPool
    from kvstress.scenarios._programs import SHARED_SHARE

    config = ScenarioConfig(CondvarPool, is_async=False, workers=3, length=4)
    shared = 0
    for seed in range(40):
        record = run_execution(config, RandomScheduler(seed=seed))
        assert record.failure is None
        programs = record.scenario.programs if record.scenario else ()
        if programs and programs[0][:2] == (("acquire", 0.0), ("share", 1)):
            shared += 1
            releasers = {op.worker for op in record.history if op.name == "release"}
            assert set(record.scenario.workers) <= releasers  # type: ignore[union-attr]
    assert shared >= 40 * SHARED_SHARE / 3


def test_some_scenarios_open_by_draining_the_pool_while_the_others_wait() -> None:
    """About one in seven: worker 0 takes every block, sleeps, and gives them all back in a row,
    while the others wait in acquire or arrive then; a pool too large to drain gets none."""
    import random

    from kvstress.scenarios._programs import DRAIN_MAX_BLOCKS, DRAIN_SHARE, HANDOFF_WAIT

    rng = random.Random(5)
    drawn = [generate(rng, workers=3, length=5, cancel=False, blocks=3) for _ in range(600)]
    opening = (*[("acquire", 0.0)] * 3, ("sleep", HANDOFF_WAIT / 50), *[("release", None)] * 3)
    drained = [s for s in drawn if s.programs[0][:7] == opening]
    assert abs(len(drained) / len(drawn) - DRAIN_SHARE) < 0.06
    firsts = [p[0] if p[0][0] == "acquire" else p[1] for s in drained for p in s.programs[1:]]
    assert all(kind == "acquire" and timeout >= 0.05 for kind, timeout in firsts)
    arriving = [s for s in drained if s.programs[1][0] == ("sleep", HANDOFF_WAIT / 50)]
    assert 0 < len(arriving) < len(drained)  # some wait already, some arrive as blocks return
    big = [generate(rng, workers=3, length=5, cancel=False, blocks=DRAIN_MAX_BLOCKS + 1) for _ in range(300)]
    too_many = (*[("acquire", 0.0)] * (DRAIN_MAX_BLOCKS + 1), ("sleep", HANDOFF_WAIT / 50))
    assert not any(s.programs[0][: len(too_many)] == too_many for s in big)


def test_shrinking_goes_on_when_a_dropped_switch_shortens_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping a switch can end a run sooner (fewer choices); shrinking then went on indexing
    the longer list it started from: IndexError, 'kvstress failed in its own code', exit 3
    (a blind user's executor-front pool, now and then)."""
    from types import SimpleNamespace

    from kvstress._violation import InvariantViolation
    from kvstress.scenarios import _search
    from kvstress.scenarios._programs import Scenario
    from kvstress.schedulers import Schedule

    long = Schedule("random", 1, (0, 1, 0, 1, 0, 1, 0, 1))
    violation = InvariantViolation("lost-block", "planted")
    failure = _search.ScenarioFailure(violation, long, Scenario(()), ())

    def run_execution(config: object, scheduler: object) -> object:
        # A full-length edit (the switch-dropping pass) fails in a run of two choices; the
        # prefix search's shorter guides pass.
        full = len(scheduler.guide) == len(long.choices)  # type: ignore[attr-defined]
        return SimpleNamespace(failure=violation if full else None)

    def shortened(record: object, schedule: object) -> _search.ScenarioFailure:
        return _search.ScenarioFailure(violation, Schedule("random", 1, (0, 1)), Scenario(()), ())

    monkeypatch.setattr(_search, "run_execution", run_execution)
    monkeypatch.setattr(_search, "_failure", shortened)
    best = _search.shrink_failure(None, failure)  # type: ignore[arg-type]
    assert best.schedule.choices == (0, 1)


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
@pytest.mark.parametrize("seed", range(2))
def test_a_timeout_kept_by_the_pools_own_thread_is_not_judged_early(seed: int) -> None:
    """An async face over a threaded pool through worker threads of the pool's own: a worker's
    timed wait passes in real time while the loop's virtual clock stands still, and every
    timed-out acquire was judged early. Where the run watches such a thread, earliness is read
    on the real clock too."""
    from pools.thread_bridge import ThreadBridgePool

    result = search(config_for(ThreadBridgePool), RandomScheduler(seed=seed), max_executions=40)
    assert result.failure is None, result.failure.describe()


@pytest.mark.parametrize("seed", range(4))
def test_a_cancelled_acquire_the_pool_still_serves_is_no_lost_block(seed: int) -> None:
    """An async pool that serves each acquire in a task of its own: the task outlives a cancelled
    caller, takes a block released later and gives it back a turn after. A try-once meanwhile
    (a worker's, or the drain's) finds no block free: lost-block on every seed, by the
    linearizability check or the drain (CI, the same design on worker threads, now and then)."""
    from pools.task_per_request import TaskPerRequestPool

    result = search(config_for(TaskPerRequestPool), RandomScheduler(seed=seed), max_executions=200)
    assert result.failure is None, result.failure.describe()


def test_an_executor_front_whose_thread_outlives_a_caller_that_timed_out_is_clean() -> None:
    """run_in_executor + wait_for with the same timeout: the thread may get a block after its
    caller gave up, and gives it back from the future's callback. Its twin drops the block."""
    from pools.executor_front import ExecutorFrontLeakPool, ExecutorFrontPool

    result = search(config_for(ExecutorFrontPool), RandomScheduler(seed=0), max_executions=60)
    assert result.failure is None, result.failure.describe()
    leak = search(
        config_for(ExecutorFrontLeakPool), RandomScheduler(seed=0), max_executions=200, shrink=False
    )
    assert leak.failure is not None and leak.failure.violation.invariant == "lost-block"


def test_a_block_the_pool_takes_for_a_cancelled_acquire_and_keeps_is_lost() -> None:
    from pools.task_per_request import TaskPerRequestLeakPool

    result = search(
        config_for(TaskPerRequestLeakPool), RandomScheduler(seed=0), max_executions=400, shrink=False
    )
    assert result.failure is not None and result.failure.violation.invariant == "lost-block"


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
def test_a_timeout_cut_short_by_the_pools_own_thread_is_still_early() -> None:
    from pools.thread_bridge import ThreadBridgeHalfTimeoutPool

    result = search(
        config_for(ThreadBridgeHalfTimeoutPool), RandomScheduler(seed=0), max_executions=200, shrink=False
    )
    assert result.failure is not None and result.failure.violation.invariant == "timeout-early"


@pytest.mark.parametrize("pool", ["IgnoresTimeoutPool", "ThreadedIgnoresTimeoutPool"])
def test_a_deadlock_names_the_acquires_in_flight_with_a_timeout_nothing_would_end(pool: str) -> None:
    """A pool that waits with no deadline: its hang read only as "a lost wake-up, or a wait on
    real I/O or a thread" (a blind user's); it names the timed acquires nothing would end."""
    from pools import ignores_timeout

    factory = getattr(ignores_timeout, pool)
    result = search(config_for(factory), RandomScheduler(seed=0), max_executions=200, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "hang"
    message = result.failure.violation.message
    assert "In flight with a timeout, and nothing pending that would end it then: b" in message
    assert "(a wait that does not keep its timeout" in message


@pytest.mark.parametrize(
    ("pool", "said"),
    [
        ("UnprintableErrorPool", "_Unprintable: <its str() raised ValueError>"),
        ("HugeErrorPool", "(1,048,576 characters)"),
    ],
)
def test_an_exception_awkward_to_print_is_a_crash_said_in_a_line(pool: str, said: str) -> None:
    """One whose str() raises killed the fuzzing process in kvstress's own message code (a
    report then blamed the pool for ending it); one of a megabyte filled the terminal."""
    from pools import odd_errors

    result = search(
        config_for(getattr(odd_errors, pool)), RandomScheduler(seed=0), max_executions=5, shrink=False
    )
    assert result.failure is not None and result.failure.violation.invariant == "crash"
    message = result.failure.violation.message
    assert said in message and len(message) < 2000, message[:300]


@pytest.mark.parametrize("pool", ["HelperTaskRaisesPool", "HelperCallbackRaisesPool"])
def test_a_pool_s_own_task_or_callback_that_raises_is_a_crash(pool: str) -> None:
    """asyncio only logs an exception in a task nobody awaits or in a callback: the run was
    clean (protocol.md says an exception in a pool's own worker fails the run; a thread's did)."""
    from pools import task_raises

    result = search(
        config_for(getattr(task_raises, pool)), RandomScheduler(seed=0), max_executions=20, shrink=False
    )
    assert result.failure is not None and result.failure.violation.invariant == "crash"
    assert "a task or callback of the pool's own raised" in result.failure.violation.message
    assert "RuntimeError: bookkeeping failed" in result.failure.violation.message


def test_a_run_stopped_before_a_worker_began_closes_its_program() -> None:
    """A run stopped by a limit (or a finding) before a worker's task began dropped its program
    unclosed: "coroutine 'ScenarioOps.run_program' was never awaited" at a later collection, in
    the user's output (CI's log; anyio's wrapper task is what asyncio cancels, not the program)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        record = run_execution(ScenarioConfig(AsyncBlockPool, True, max_steps=1), RandomScheduler(seed=0))
        gc.collect()
    assert record.failure is not None and record.failure.invariant == "hang"
    assert not [str(w.message) for w in seen if "never awaited" in str(w.message)]


@pytest.mark.parametrize("seed", range(4))
def test_a_timed_out_waiter_that_leaves_the_queue_a_turn_later_is_no_lost_wakeup(seed: int) -> None:
    """poolboy's design: a timeout sends a cancel message the pool handles on its next turn, and
    a block released in between goes to the stale waiter entry, then straight back. A try-once
    in that turn found none free: lost-wakeup or lost-block on every seed (a blind user's)."""
    from pools.late_cancel import LateCancelPool

    result = search(config_for(LateCancelPool), RandomScheduler(seed=seed), max_executions=300)
    assert result.failure is None, result.failure.describe()


def test_a_stale_waiter_entry_that_keeps_its_block_is_lost() -> None:
    from pools.late_cancel import LateCancelLeakPool

    result = search(config_for(LateCancelLeakPool), RandomScheduler(seed=0), max_executions=300, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "lost-block"


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
@pytest.mark.parametrize("pool", ["DeadlineExecutorPool", "DeadlineAllocatorPool"])
@pytest.mark.parametrize("seed", range(2))
def test_a_deadline_the_loop_computes_and_a_thread_waits_until_is_on_one_clock(pool: str, seed: int) -> None:
    """The pool's module read virtual time on the loop's thread and real time in its others: a
    worker saw the caller's deadline long past and answered None at once (timeout-early, every
    seed); a parked allocator that read the loop's clock saw it stand still (a hang)."""
    from pools import deadline_thread

    result = search(config_for(getattr(deadline_thread, pool)), RandomScheduler(seed=seed), max_executions=60)
    assert result.failure is None, result.failure.describe()


def test_a_thread_that_gives_up_before_the_deadline_is_still_early() -> None:
    from pools.deadline_thread import DeadlineExecutorEarlyPool

    result = search(
        config_for(DeadlineExecutorEarlyPool), RandomScheduler(seed=0), max_executions=200, shrink=False
    )
    assert result.failure is not None and result.failure.violation.invariant == "timeout-early"


@pytest.mark.parametrize("pool", ["AnyioThreadWaitPool", "AnyioFailAfterPool", "AnyioDeadlinePool"])
@pytest.mark.parametrize("seed", range(2))
def test_a_trio_run_lets_its_clock_run_while_a_thread_waits(pool: str, seed: int) -> None:
    """On trio the run's clock stood still while work was out in a thread: a thread that waited
    out the caller's timeout answered after 0 s (timeout-early), and fail_after around a thread's
    wait never fired (hang), on every seed (blind users' pools, clean on asyncio). And a worker
    thread read the real clock: a deadline the task computed on the run's clock was long past
    (timeout-early, every seed)."""
    from pools import anyio_thread

    factory = getattr(anyio_thread, pool)
    result = search(config_for(factory, backend="trio"), RandomScheduler(seed=seed), max_executions=40)
    assert result.failure is None, result.failure.describe()


def test_a_trio_pools_thread_that_keeps_a_gone_callers_block_is_still_found() -> None:
    from pools.anyio_thread import AnyioThreadKeepsPool

    result = search(
        config_for(AnyioThreadKeepsPool, backend="trio"),
        RandomScheduler(seed=0),
        max_executions=300,
        shrink=False,
    )
    assert result.failure is not None and result.failure.violation.invariant == "lost-block"


@pytest.mark.parametrize("seed", range(3))
def test_pct_lets_a_background_threads_tick_into_a_workers_window(seed: int) -> None:
    """PCT offered no timer early: a housekeeping thread's 2 ms tick waited until every worker
    blocked, so its scrub of idle blocks outside the lock never met a worker's tenancy (missed
    for 8 s on seeds 0-2, a blind user's evictor pool too). Every other PCT execution now
    offers timers due soon, as random does; the schedule says which, and replays exactly."""
    from kvstress.mutants import HousekeepingScrubOutsideLockPool
    from kvstress.schedulers import ALL_TIMERS

    config = config_for(HousekeepingScrubOutsideLockPool)
    result = search(config, PCTScheduler(seed=seed), max_executions=120, shrink=False)
    assert result.failure is not None and result.failure.violation.invariant == "shared-block"
    assert result.failure.schedule.timers == ALL_TIMERS
    again = replay(config, str(result.failure.schedule))
    assert again is not None and again.violation.invariant == "shared-block"


def test_pct_alternates_its_executions_with_and_without_early_timers() -> None:
    from kvstress.schedulers import ALL_TIMERS

    scheduler = PCTScheduler(seed=0)
    levels = []
    for _ in range(4):
        assert scheduler.new_execution()
        levels.append(scheduler.schedule().timers)
    assert levels == [0, ALL_TIMERS, 0, ALL_TIMERS]


def test_an_explored_tests_pct_never_fires_timers_early() -> None:
    """Its PCT schedules keep timers in order; the random walks between them (every other
    schedule) fire a sleeping thread's timer early as the explored tests' random does
    (``SLEEPERS``), never any timer (``ALL_TIMERS``: a test's assertions cannot credit it)."""
    from kvstress.explorer._strategies import STRATEGIES
    from kvstress.schedulers import SLEEPERS

    scheduler = STRATEGIES["pct"](0)
    levels = []
    for _ in range(4):
        assert scheduler.new_execution()
        levels.append(scheduler.schedule().timers)
    assert levels == [0, SLEEPERS, 0, SLEEPERS]
    assert STRATEGIES["random"](0).fires_timers == SLEEPERS


@pytest.mark.parametrize("seed", range(4))
def test_a_block_lost_by_a_pool_with_work_always_out_in_a_thread_is_not_a_hang(seed: int) -> None:
    """The quiet check's wait for a block on its way back excused all the time work was out in
    a thread; a compactor sorting in an executor every 2 ms kept it out, so a block it dropped
    was waited for until the run's time limit: `hang` on seed 3 (a blind user's)."""
    from pools.executor_compactor import ExecutorCompactorStalePool

    config = config_for(ExecutorCompactorStalePool)
    result = search(config, PCTScheduler(seed=seed), max_executions=100, shrink=False)
    # The stale copy drops blocks released meanwhile (lost-block) or brings back one taken
    # meanwhile: handed out again (shared-block), or queued twice once its holder gives it back
    # (queue-corruption, CI's seed 1). The thread's timing decides which; never a hang.
    assert result.failure is not None
    assert result.failure.violation.invariant in ("lost-block", "shared-block", "queue-corruption")


@pytest.mark.parametrize("seed", range(2))
def test_a_pool_with_work_always_out_in_a_thread_is_clean(seed: int) -> None:
    from pools.executor_compactor import ExecutorCompactorPool

    result = search(config_for(ExecutorCompactorPool), PCTScheduler(seed=seed), max_executions=40)
    assert result.failure is None, result.failure.describe()


def test_what_a_thread_the_pool_started_raises_is_a_crash_with_its_schedule() -> None:
    """It went up through the search (and ended a fuzzing child, reported as the pool having
    ended the process, with nothing to replay)."""
    config = config_for(ResetThreadRaisesPool)
    result = search(config, RandomScheduler(seed=0), max_executions=50, shrink=False)
    assert result.failure is not None
    violation = result.failure.violation
    assert violation.invariant == "crash", result.failure.describe()
    assert "a thread the pool started raised RuntimeError: the reset thread gave up" in violation.message
    again = replay(config, result.failure.schedule)
    assert again is not None and again.violation.invariant == "crash"


def test_a_finding_names_the_pools_own_task_that_died_before_it() -> None:
    """An offering task of the pool's own died with an exception nobody awaited: the finding
    (its lost blocks) names the death, which asyncio logged only after the run, on stderr (a
    blind user's actor pool)."""
    result = search(config_for(DyingOfferTaskPool), RandomScheduler(seed=0), max_executions=60)
    assert result.failure is not None
    message = result.failure.violation.message
    assert "a task of the pool's own ended by raising, handled or not: " in message, message
    assert "RuntimeError: the offering task's second job" in message, message
