"""The controlled asyncio loop: scheduler-chosen interleavings, virtual time, factories, clear errors."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import time
import warnings
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
import pytest
from hint_log import HintLog

import kvstress.controlled
from kvstress import AsyncBlockPool
from kvstress.controlled import (
    ControlledEventLoop,
    Deadlock,
    SchedulerExhausted,
    SchedulerMisbehaved,
    StepLimitExceeded,
    controlled_loop_factory,
    current_loop,
    run_controlled,
)
from kvstress.schedulers import (
    DFSScheduler,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Schedule,
    Scheduler,
)

pytest_plugins = ["pytester"]

PUBLIC = {
    "DEFAULT_MAX_STEPS",
    "LATE_WINDOW",
    "ControlledEventLoop",
    "ControlledLoopError",
    "Deadlock",
    "Exploration",
    "SchedulerExhausted",
    "SchedulerMisbehaved",
    "StepLimitExceeded",
    "StuckThread",
    "TaskStepTrace",
    "ThreadDeadlock",
    "TimeLimitExceeded",
    "controlled_loop_factory",
    "current_loop",
    "explore",
    "explore_threads",
    "run_controlled",
    "run_threads",
    "seeded_trio_run",
    "spawn",
}


class Recording:
    """Wraps a scheduler and keeps every runnable set it was offered (to see the task ids)."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.offered: list[tuple[int, ...]] = []

    def new_execution(self) -> bool:
        return self.inner.new_execution()

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        self.offered.append(tuple(runnable))
        return self.inner.next_task(runnable, current)

    def next_u64(self) -> int:
        return self.inner.next_u64()

    def schedule(self) -> Schedule:
        return self.inner.schedule()


def workers(trace: list[str], count: int = 3, rounds: int = 4) -> Callable[[], Coroutine[Any, Any, int]]:
    """A program of ``count`` tasks that log each step to ``trace``; returns one random value."""

    async def main() -> int:
        async def worker(name: str) -> None:
            for step in range(rounds):
                trace.append(f"{name}{step}")
                await asyncio.sleep(0)

        await asyncio.gather(*(worker(chr(ord("a") + i)) for i in range(count)))
        return current_loop().scheduler.next_u64()

    return main


def test_public_names_are_pinned() -> None:
    """kvstress.controlled exports exactly the pinned names, each defined in a private module."""
    for name in PUBLIC:  # the trio helpers load on first access
        getattr(kvstress.controlled, name)
    # isidentifier: pytest rewrites kvstress (it ships a pytest11 plugin), adding @py_builtins, @pytest_ar
    exported = {
        name
        for name in vars(kvstress.controlled)
        if name.isidentifier() and not name.startswith("_") and name != "TYPE_CHECKING"
    }
    assert exported == PUBLIC
    for name in PUBLIC - {"DEFAULT_MAX_STEPS", "LATE_WINDOW"}:
        assert "._" in getattr(kvstress.controlled, name).__module__, name


# -- interleavings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: RandomScheduler(seed=17), lambda: PCTScheduler(3, seed=17)])
def test_same_seed_same_interleaving(make: Callable[[], Scheduler]) -> None:
    """Two runs with one seed take the same steps in the same order and draw the same values."""
    runs = []
    for _ in range(2):
        scheduler, trace = make(), []
        for _ in range(3):  # later executions too (PCT learns between them)
            trace.clear()
            value = run_controlled(workers(trace), scheduler)
        runs.append((trace, value, scheduler.schedule()))
    assert runs[0] == runs[1]


def test_different_seeds_give_different_interleavings() -> None:
    """Across ten seeds the random scheduler produces more than one interleaving."""
    seen = set()
    for seed in range(10):
        trace: list[str] = []
        run_controlled(workers(trace), RandomScheduler(seed=seed))
        seen.add(tuple(trace))
    assert len(seen) > 5


def test_replay_reproduces_the_interleaving() -> None:
    """Replaying a run's schedule (as text) repeats its steps and its random value."""
    trace: list[str] = []
    scheduler = RandomScheduler(seed=3)
    value = run_controlled(workers(trace), scheduler)
    replayed: list[str] = []
    assert run_controlled(workers(replayed), ReplayScheduler(scheduler.schedule().encode())) == value
    assert replayed == trace


def test_tasks_are_numbered_in_creation_order() -> None:
    """The main task is 1, its children 2, 3, 4 in creation order, plain callbacks 0."""
    recording = Recording(RandomScheduler(seed=1))
    run_controlled(workers([]), recording)
    offered = {task for runnable in recording.offered for task in runnable}
    assert {2, 3, 4} <= offered <= {0, 1, 2, 3, 4}


def test_decisions_are_asked_only_when_there_is_a_choice() -> None:
    """Every runnable set offered to the scheduler has two or more tasks, ascending."""
    recording = Recording(RandomScheduler(seed=2))
    run_controlled(workers([]), recording)
    assert recording.offered
    assert all(len(runnable) >= 2 and list(runnable) == sorted(runnable) for runnable in recording.offered)


def test_dfs_bound_zero_runs_each_task_until_it_blocks() -> None:
    """Without preemptions a task that yields with sleep(0) keeps running until it finishes."""
    trace: list[str] = []
    run_controlled(workers(trace), DFSScheduler(preemption_bound=0))
    assert trace == [f"{name}{step}" for name in "abc" for step in range(4)]


# -- virtual time ----------------------------------------------------------------------------------


def test_sleep_and_wait_for_run_on_virtual_time() -> None:
    """sleep(30) and wait_for(..., 30) take virtual seconds, exact, and almost no real time."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(30)
        after_sleep = loop.time() - start
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 30)
        after_wait_for = loop.time() - start
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.5):
                await asyncio.Event().wait()
        return [after_sleep, after_wait_for, loop.time() - start]

    began = time.perf_counter()
    assert run_controlled(main, RandomScheduler(seed=1)) == [30.0, 60.0, 62.5]
    assert time.perf_counter() - began < 0.1


def test_timers_fire_in_order_at_their_exact_times() -> None:
    """Tasks sleeping 3, 1 and 2 seconds wake at exactly 1, 2, 3 (from start_time 100)."""
    woke: list[tuple[str, float]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def sleeper(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            woke.append((name, loop.time()))

        await asyncio.gather(sleeper("c", 3), sleeper("a", 1), sleeper("b", 2))

    with asyncio.Runner(
        loop_factory=controlled_loop_factory(RandomScheduler(seed=4), start_time=100)
    ) as runner:
        runner.run(main())
    assert woke == [("a", 101.0), ("b", 102.0), ("c", 103.0)]


def test_cancelled_timers_and_callbacks_are_skipped() -> None:
    """Hundreds of cancelled timeouts and a cancelled callback neither run nor advance time."""
    ran: list[str] = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        loop.call_soon(ran.append, "cancelled").cancel()
        loop.call_later(5, ran.append, "cancelled timer").cancel()
        for _ in range(300):
            await asyncio.wait_for(asyncio.sleep(0), timeout=1000)
        await asyncio.sleep(1)
        return loop.time()

    assert run_controlled(main, RandomScheduler(seed=5)) == 1.0
    assert ran == []


# -- factories: asyncio.Runner, anyio, pytest-asyncio -----------------------------------------------


def test_anyio_runs_on_the_controlled_loop() -> None:
    """anyio.run(backend="asyncio", backend_options={"loop_factory": ...}) uses the controlled loop."""

    async def main() -> tuple[str, float]:
        start = anyio.current_time()
        await anyio.sleep(30)
        with anyio.move_on_after(5):
            await anyio.Event().wait()
        return type(asyncio.get_running_loop()).__name__, anyio.current_time() - start

    factory = controlled_loop_factory(RandomScheduler(seed=6))
    began = time.perf_counter()
    result = anyio.run(main, backend="asyncio", backend_options={"loop_factory": factory})
    assert result == ("ControlledEventLoop", 35.0)
    assert time.perf_counter() - began < 0.1


def test_pool_timeouts_are_judged_on_the_loop_clock() -> None:
    """AsyncBlockPool.acquire(timeout=30) on an empty pool gives up at exactly +30 virtual seconds."""

    async def main() -> tuple[bool, float]:
        pool = AsyncBlockPool(1, (2,))
        held = await pool.acquire()
        assert held is not None
        start = anyio.current_time()
        missed = await pool.acquire(timeout=30)
        return missed is None, anyio.current_time() - start

    factory = controlled_loop_factory(RandomScheduler(seed=7))
    assert anyio.run(main, backend="asyncio", backend_options={"loop_factory": factory}) == (True, 30.0)


def test_pytest_asyncio_loop_factory_hook(pytester: pytest.Pytester) -> None:
    """pytest-asyncio's pytest_asyncio_loop_factories hook runs async tests on the controlled loop."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        """
        from kvstress.controlled import controlled_loop_factory
        from kvstress.schedulers import RandomScheduler

        def pytest_asyncio_loop_factories(config, item):
            return {"controlled": controlled_loop_factory(RandomScheduler(seed=5))}
        """
    )
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.asyncio
        async def test_virtual_time():
            loop = asyncio.get_running_loop()
            start = loop.time()
            await asyncio.sleep(30)
            assert type(loop).__name__ == "ControlledEventLoop"
            assert loop.time() - start == 30
        """
    )
    result = pytester.runpytest_inprocess("-p", "asyncio", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=1)


# -- errors instead of hangs -----------------------------------------------------------------------


def test_lost_wake_up_is_a_deadlock_not_a_hang() -> None:
    """Tasks waiting for an event nobody sets raise Deadlock naming the waiting tasks."""

    async def main() -> None:
        never = asyncio.Event()
        waiter = asyncio.create_task(never.wait(), name="waiter")
        await waiter

    with pytest.raises(Deadlock, match=r"deadlock at virtual time 0: .* 2 waiting tasks .*waiter"):
        run_controlled(main, RandomScheduler(seed=1))


def test_a_deadlock_says_where_each_task_waits_through_a_hand_driven_awaitable() -> None:
    """Each waiting task is named with the line it waits at, inside a coroutine the harness
    drives by hand (its wake-up counter): the message said `value = yield yielded`."""
    from kvstress.harness._runner import Suspensions

    async def acquire_that_never_returns(never: asyncio.Event) -> None:
        await never.wait()  # the pool's line

    async def main() -> None:
        await Suspensions(acquire_that_never_returns(asyncio.Event()))

    with pytest.raises(Deadlock) as caught:
        run_controlled(main, RandomScheduler(seed=1))
    assert "test_controlled_loop.py:" in str(caught.value)
    assert "`await never.wait()  # the pool's line`" in str(caught.value)


@pytest.mark.parametrize("steps", [500, 5000])
def test_livelock_hits_the_step_limit(steps: int) -> None:
    """Two tasks that keep yielding forever raise StepLimitExceeded after max_steps callbacks; past
    ``CREEP_AFTER`` steps time creeps a float a step, and the message still reads 0 s (it read
    9.38725e-320 s)."""

    async def main() -> None:
        async def spin() -> None:
            while True:
                await asyncio.sleep(0)

        await asyncio.gather(spin(), spin())

    said = f"ran {steps} callbacks at virtual time 0 s without time moving"
    with pytest.raises(StepLimitExceeded, match=said):
        run_controlled(main, RandomScheduler(seed=1), max_steps=steps)


def test_exhausted_scheduler_refuses_a_new_loop() -> None:
    """A loop for an exhausted scheduler raises SchedulerExhausted; main() is never created."""
    scheduler = DFSScheduler(preemption_bound=0)
    run_controlled(workers([], count=1), scheduler)
    created = []

    async def main() -> None:
        created.append(True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SchedulerExhausted, match="DFSScheduler has no execution left"):
            run_controlled(main, scheduler)
        gc.collect()
    assert created == [] and not caught


def test_scheduler_choosing_a_task_not_offered_is_refused() -> None:
    """A scheduler that returns an id outside the runnable set raises SchedulerMisbehaved."""

    class Wrong(Recording):
        def next_task(self, runnable: Sequence[int], current: int | None) -> int:
            return 99

    with pytest.raises(SchedulerMisbehaved, match=r"returned 99, not one of the runnable tasks \[\d"):
        run_controlled(workers([]), Wrong(RandomScheduler(seed=1)))


def test_failing_scheduler_still_lets_the_run_shut_down() -> None:
    """When the scheduler raises, its error propagates and every task still gets cancelled."""
    cleaned: list[str] = []

    class Failing(Recording):
        def next_task(self, runnable: Sequence[int], current: int | None) -> int:
            if len(self.offered) == 3:
                raise KeyError("scheduler broke")
            return super().next_task(runnable, current)

    async def main() -> None:
        async def worker(name: str) -> None:
            try:
                while True:
                    await asyncio.sleep(0)
            finally:
                cleaned.append(name)

        await asyncio.gather(worker("a"), worker("b"))

    with pytest.raises(KeyError, match="scheduler broke"):
        run_controlled(main, Failing(RandomScheduler(seed=1)))
    assert sorted(cleaned) == ["a", "b"]


def test_bad_arguments_and_foreign_loops_are_refused() -> None:
    """max_steps < 1, a non-finite start_time, and current_loop() on a plain loop raise clearly."""
    with pytest.raises(ValueError, match=r"max_steps must be an int >= 1, got 0 \(int\)"):
        ControlledEventLoop(RandomScheduler(seed=1), max_steps=0)
    with pytest.raises(ValueError, match="start_time must be a finite number"):
        ControlledEventLoop(RandomScheduler(seed=1), start_time=float("inf"))

    async def main() -> None:
        current_loop()

    with pytest.raises(RuntimeError, match="not a ControlledEventLoop"):
        asyncio.run(main())


def test_polling_with_sleeps_is_not_a_spin_but_time_is_bounded() -> None:
    """The step bound counts callbacks per instant (sleeps let time move); max_time bounds time."""
    from kvstress.controlled import TimeLimitExceeded, run_controlled
    from kvstress.schedulers import RandomScheduler

    async def poll(until: float) -> float:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            await asyncio.sleep(0.001)
        return loop.time()

    assert run_controlled(lambda: poll(5.0), RandomScheduler(seed=1), max_steps=50) >= 5.0
    with pytest.raises(TimeLimitExceeded, match="virtual time would pass 2 s"):
        run_controlled(lambda: poll(float("inf")), RandomScheduler(seed=1), max_time=2.0)


def test_a_time_limit_names_where_each_task_waits() -> None:
    """A request waiting on a future nobody resolves, beside a ticker that keeps time moving:
    the time limit says which await it is (a blind user's hang took 80 s to report and named
    no task)."""
    from kvstress.controlled import TimeLimitExceeded, run_controlled
    from kvstress.schedulers import RandomScheduler

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        never: asyncio.Future[None] = loop.create_future()

        async def ticker() -> None:
            while True:
                await asyncio.sleep(0.01)

        async def request() -> None:
            await never  # nobody resolves it

        tick = asyncio.create_task(ticker(), name="ticker")
        await asyncio.create_task(request(), name="request")
        tick.cancel()

    with pytest.raises(TimeLimitExceeded) as caught:
        run_controlled(serve, RandomScheduler(seed=1), max_time=1.0)
    assert "'request' at test_controlled_loop.py:" in str(caught.value)
    assert "`await never  # nobody resolves it`" in str(caught.value)


def test_work_in_a_thread_is_waited_for_not_called_a_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """``to_thread`` (and the executor's shutdown when the run closes) come back from real
    threads: the loop waits for them instead of calling the wait a deadlock, and virtual time
    runs with real time while they work, as a real loop's clock does: a 50 ms sleep in a thread
    takes at least 50 ms of the loop's time (a blind user's test read 0 there), and a timeout
    shorter than it fires, one longer does not."""
    import threading

    async def main(limit: float) -> tuple[int, float]:
        start = asyncio.get_running_loop().time()
        async with asyncio.timeout(limit):
            got = await asyncio.to_thread(lambda: (time.sleep(0.05), 7)[1])
        return got, asyncio.get_running_loop().time() - start

    for seed in range(3):
        got, elapsed = run_controlled(lambda: main(1.0), RandomScheduler(seed))
        assert got == 7 and 0.05 <= elapsed < 1.0
        with pytest.raises(TimeoutError):
            run_controlled(lambda: main(0.01), RandomScheduler(seed))
    # A thread that never comes back is still a deadlock, after the bound.
    monkeypatch.setattr(kvstress.controlled._loop, "THREAD_WAIT_S", 0.2)
    never = threading.Event()

    async def stuck() -> None:
        await asyncio.to_thread(never.wait, 5)

    with pytest.raises(Deadlock, match=r"1 call\(s\) run in a thread .* did not come back within 0.2 s"):
        run_controlled(stuck, RandomScheduler(1))
    never.set()


def test_anyio_worker_threads_are_waited_for_too() -> None:
    """``anyio.to_thread.run_sync`` runs on anyio's own worker threads, not through
    ``run_in_executor``: on the controlled loop it is waited for all the same (a timeout around
    it does not fire, and a wait with no timer is no deadlock), and outside a controlled run
    ``anyio.to_thread.run_sync`` is anyio's own function again."""
    import anyio.to_thread

    real = anyio.to_thread.run_sync

    async def main() -> tuple[int, float]:
        start = asyncio.get_running_loop().time()
        async with asyncio.timeout(1):
            got = await anyio.to_thread.run_sync(lambda: (time.sleep(0.05), 7)[1])
        got += await anyio.to_thread.run_sync(lambda: (time.sleep(0.05), 1)[1])  # no timer at all
        return got, asyncio.get_running_loop().time() - start

    for seed in range(3):
        got, elapsed = run_controlled(main, RandomScheduler(seed))
        assert got == 8 and 0.1 <= elapsed < 1.0
    assert anyio.to_thread.run_sync is real
    assert asyncio.run(anyio.to_thread.run_sync(lambda: 3)) == 3  # a stock loop: untouched


def test_work_submitted_to_an_executor_is_waited_for_and_a_long_lived_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``ThreadPoolExecutor`` of the code's own: a submission made on the loop's thread is
    waited for, on real time, before a timer due later fires (its result comes back by
    ``call_soon_threadsafe``, as a reset offering its block does), and a timer due sooner fires
    first, as on a real loop. A submission still running after ``SUBMITTED_WAIT_S`` with no
    timer due sooner (a worker for the executor's whole life) is let be: virtual time jumps on
    to the next timer without it. Outside a controlled run ``submit`` is the stock method."""
    import concurrent.futures
    import threading

    real_submit = concurrent.futures.ThreadPoolExecutor.submit
    monkeypatch.setattr(kvstress.controlled._loop, "SUBMITTED_WAIT_S", 0.3)

    async def main(timer: float) -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as executor:
            forever = threading.Event()
            executor.submit(forever.wait, 10)  # long-lived
            executor.submit(lambda: (time.sleep(0.05), loop.call_soon_threadsafe(order.append, "back")))
            await asyncio.sleep(timer)
            order.append("timer")
            began = time.perf_counter()
            await asyncio.sleep(60)  # the long-lived one alone is out: no real minute waited
            assert time.perf_counter() - began < 5
            forever.set()
        return order

    for seed in range(2):
        assert run_controlled(lambda: main(0.5), RandomScheduler(seed)) == ["back", "timer"]
        assert run_controlled(lambda: main(0.005), RandomScheduler(seed)) == ["timer", "back"]
    assert concurrent.futures.ThreadPoolExecutor.submit is real_submit


def test_a_thread_of_the_codes_own_that_answers_while_it_looks_parked_is_no_deadlock() -> None:
    """A thread the code started (an allocator thread serving requests) is handed work, and
    answers a moment later with ``call_soon_threadsafe``, but looks parked meanwhile (here it
    sleeps first; on a loaded machine, it was woken and not yet on a CPU). With nothing ready and
    no timer, the loop waited for nobody and raised Deadlock (a blind user's asyncio front over
    an allocator thread: 'hang' on 2 of 2 seeds under load); it now gives such a thread
    ``SUBMITTED_WAIT_S`` of real time first. A real deadlock beside it is still one."""
    import queue
    import threading

    async def main(answers: bool) -> int:
        loop = asyncio.get_running_loop()
        requests: queue.SimpleQueue[asyncio.Future[int]] = queue.SimpleQueue()

        def serve() -> None:
            future = requests.get()
            time.sleep(0.05)  # parked, as the kernel sees it
            if answers:
                loop.call_soon_threadsafe(future.set_result, 7)

        threading.Thread(target=serve, daemon=True).start()
        future = loop.create_future()
        requests.put(future)
        return await future

    for seed in range(2):
        assert run_controlled(lambda: main(True), RandomScheduler(seed)) == 7
    with pytest.raises(Deadlock):
        run_controlled(lambda: main(False), RandomScheduler(0))


ASYNC_GLOBALS_SOURCE = """
import asyncio

LOCK = asyncio.Lock()
COND = asyncio.Condition(LOCK)
EVENT = asyncio.Event()
EVENT.set()
SEMAPHORE = asyncio.Semaphore(3)
BOUNDED = asyncio.BoundedSemaphore(4)
JOBS = asyncio.Queue()
JOBS.put_nowait("a")
JOBS.put_nowait("b")


class Shared:
    ready = asyncio.Event()


FLAG = asyncio.Event()


async def contend():
    async def waiter():
        async with COND:
            await COND.wait_for(FLAG.is_set)  # waits: binds COND to this loop

    async def setter():
        await asyncio.sleep(0)
        async with COND:
            FLAG.set()
            COND.notify_all()

    await asyncio.gather(waiter(), waiter(), setter())
    FLAG.clear()
    return [await JOBS.get(), await JOBS.get()]


def names():
    return dict(LOCK=LOCK, COND=COND, EVENT=EVENT, SEMAPHORE=SEMAPHORE, BOUNDED=BOUNDED, JOBS=JOBS,
                FLAG=FLAG, ready=Shared.ready)
"""


def test_asyncio_primitives_made_at_import_get_a_fresh_copy_per_loop() -> None:
    """An asyncio primitive made at import binds to the first loop that waits on it; inside
    own_loop_primitives each loop gets fresh copies in the same state, and the real ones come back
    after: two runs on two loops contend on a module-level Condition without 'bound to a
    different event loop'."""
    import types

    from kvstress.controlled._patch import own_loop_primitives

    module = types.ModuleType("kvstress_test_async_globals")
    exec(compile(ASYNC_GLOBALS_SOURCE, "<async globals>", "exec"), module.__dict__)
    before = module.names()
    asyncio.run(module.SEMAPHORE.acquire())  # value 2 now
    asyncio.run(module.BOUNDED.acquire())  # value 3 of 4
    for _ in range(2):
        with own_loop_primitives([module]):
            inside = module.names()
            assert asyncio.run(module.contend()) == ["a", "b"]
    assert module.names() == before
    assert all(inside[name] is not before[name] for name in before)
    assert inside["COND"]._lock is inside["LOCK"] and inside["EVENT"].is_set()
    assert (inside["SEMAPHORE"]._value, inside["BOUNDED"]._value, inside["BOUNDED"]._bound_value) == (2, 3, 4)
    assert before["JOBS"].qsize() == 2 and before["SEMAPHORE"]._value == 2 and before["BOUNDED"]._value == 3


# -- a task's own callbacks keep their place before its next step --------------------------------


def _first_await_raises(enter: Callable[[], Any]) -> Callable[[], Coroutine[Any, Any, None]]:
    """A test whose task enters a scope already cancelled (``enter``) and awaits once: on any
    asyncio loop the cancellation lands at that await. A second task gives the scheduler choices."""

    async def main() -> None:
        other = asyncio.create_task(asyncio.sleep(0))
        reached = False
        with contextlib.suppress(TimeoutError):
            async with enter():
                await asyncio.sleep(0)
                reached = True
        assert not reached, "the await after a cancelled scope returned"
        await other

    return main


@contextlib.asynccontextmanager
async def _expired_timeout() -> Any:
    async with asyncio.timeout_at(asyncio.get_running_loop().time() - 1.0):
        yield


@contextlib.asynccontextmanager
async def _cancelled_anyio_scope() -> Any:
    with anyio.CancelScope() as scope:
        scope.cancel()
        yield
    if scope.cancelled_caught:
        raise TimeoutError


@pytest.mark.parametrize("strategy", ["pct", "random", "dfs"])
@pytest.mark.parametrize("enter", [_expired_timeout, _cancelled_anyio_scope], ids=["timeout_at", "anyio"])
def test_a_cancellation_a_task_queued_lands_at_its_next_await(
    enter: Callable[[], Any], strategy: str
) -> None:
    """``asyncio.timeout_at`` a past deadline, or an anyio scope the task cancels itself, queues
    the cancellation with ``call_soon`` before the task's next step: no schedule runs the step
    first (it did when plain callbacks had a lane of their own, a false alarm in a user's test)."""
    outcome = kvstress.explore(_first_await_raises(enter), schedules=30, strategy=strategy, seed=0)
    assert outcome.schedules >= 1


def test_the_loop_tells_a_woken_task_but_not_a_created_one() -> None:
    """A task parked on an event the running task just set is woken (the delay strategy may run
    it first, as asyncio's own FIFO ready queue does); a task just created is not."""
    log = HintLog()

    async def main() -> None:
        event = asyncio.Event()
        waiter = asyncio.create_task(event.wait(), name="waiter")
        other = asyncio.create_task(asyncio.sleep(0.02), name="other")
        await asyncio.sleep(0.01)  # the others run meanwhile: the waiter parks on the event
        event.set()
        await asyncio.sleep(0)
        await asyncio.gather(waiter, other)

    run_controlled(main, log)
    # Lanes in the order the tasks first ran: main 1, the waiter 2, the other 3.
    assert [hint for hint in log.hints if hint is not None] == [2]  # after the set only


def test_a_sleep_for_what_is_left_of_a_timeout_lets_time_move() -> None:
    """As on threads: ``timeout - (now - start)`` leaves 1.4e-17 s at 0.3 s for a 0.05 s wait
    from 0.25 s; a sleep that long still moves the loop's clock one float on, so the loop ends
    instead of running out its steps at one instant."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.25)
        start, timeout = loop.time(), 0.05
        while True:
            remaining = timeout - (loop.time() - start)
            if remaining <= 0:
                return loop.time()
            await asyncio.sleep(remaining)

    assert run_controlled(main, RandomScheduler(seed=0), max_steps=200) == pytest.approx(0.3)


class _TasksFirst(Recording):
    """Always the highest lane: a task over plain callbacks (lane 0), as PCT may rank them."""

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        self.offered.append(tuple(runnable))
        return max(runnable)


def test_a_wake_up_chosen_over_a_ready_callback_is_no_spin() -> None:
    """A waiter that polls with ``sleep(0)`` until a callback already queued runs (anyio on
    asyncio waits so for its cancellation to be delivered) wakes once on asyncio's FIFO ready
    queue; a scheduler that prefers the task makes it wake up to the fairness bound at one
    instant. Those wake-ups were chosen over the ready callback: not counted as spinning (a
    correct anyio pool was a busy-wait finding). A wait with nothing else ready still counts."""
    from kvstress.harness._runner import Suspensions

    async def poll_until(flag: list[bool]) -> None:
        while not flag[0]:
            await asyncio.sleep(0)

    async def main() -> tuple[int, int]:
        flag = [False]
        # A timer's callback, as anyio's deadline is: a plain callback of no task's lane.
        asyncio.get_running_loop().call_later(0.0, flag.__setitem__, 0, True)
        contended = Suspensions(poll_until(flag))
        await contended
        alone = Suspensions(asyncio.sleep(0.01))  # nothing else ready: the one wake-up counts
        await alone
        return contended.count, alone.count

    contended, alone = run_controlled(main, _TasksFirst(RandomScheduler(0)))
    assert contended <= 2
    assert alone == 1


def test_a_wait_recomputed_from_its_start_ends_on_virtual_time() -> None:
    """``timeout - (now - start)`` can leave a wait of 1.4e-17 s (0.05 - (0.3 - 0.25)), and
    ``asyncio.timeout`` puts its deadline at now: it fires at once, and on a clock that stands
    still the loop computes the same wait for ever (a correct pool was a busy-wait). Time moves
    a float a step once it stood for ``CREEP_AFTER`` steps, as a real clock does; a run that
    does not stand that long keeps exact times."""
    from kvstress.controlled._loop import CREEP_AFTER

    async def recomputing() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.25)
        exact = loop.time()
        start, rounds = loop.time(), 0
        while rounds < 5 * CREEP_AFTER:
            remaining = 0.05 - (loop.time() - start)
            if remaining <= 0:
                break
            rounds += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await asyncio.Event().wait()
        return rounds, exact

    rounds, exact = run_controlled(recomputing, RandomScheduler(seed=0), max_steps=20 * CREEP_AFTER)
    assert exact == 0.25
    assert rounds <= CREEP_AFTER


def test_an_asyncio_sleep_read_back_is_never_short() -> None:
    """``loop.time() - t0`` after ``asyncio.sleep(d)`` is at least ``d`` (see the baton's test)."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        short = []
        await asyncio.sleep(0.01)
        for d in (0.002, 0.004, 0.003, 0.001, 0.0007, 0.05) * 20:
            t0 = loop.time()
            await asyncio.sleep(d)
            if loop.time() - t0 < d:
                short.append(d)
        return short

    assert run_controlled(main, RandomScheduler(seed=0)) == []


def test_a_callback_that_queues_itself_again_yields_to_what_else_is_ready() -> None:
    """anyio re-delivers a cancellation with ``call_soon`` until the task takes it. Under PCT's
    priorities the retry ran again and again, up to the fairness bound: a thousand steps for
    each cancellation (a blind user's monitor, ticking in ``move_on_after(0.05)``, cost 115 ms of
    CPU a virtual second). It now yields at once, as on a stock loop's one FIFO queue."""

    async def main() -> int:
        cancelled = 0
        for _ in range(20):
            with anyio.move_on_after(0.01) as scope:
                await anyio.sleep(1)
            cancelled += scope.cancelled_caught
        return cancelled

    for seed in range(3):
        recording = Recording(PCTScheduler(3, seed=seed))
        assert run_controlled(main, recording) == 20
        assert len(recording.offered) < 20 * 20, f"{len(recording.offered)} decisions for 20 cancellations"


# -- timers that fire ahead of ready tasks -----------------------------------------------------------


def _order_of_a_timer_and_a_ready_step(scheduler: Scheduler) -> tuple[tuple[str, ...], float]:
    """A task whose sleep ends at 2 ms and a timer at 3 ms: the task is ready at 2 ms, and a
    timer due within ``FIRE_HORIZON`` may fire before its step (as behind a step that runs long).
    The order, and the loop's ``kv_excused``."""
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def prefill() -> None:
            await asyncio.sleep(0.002)
            order.append(f"step at {loop.time():g}")

        task = asyncio.create_task(prefill())
        loop.call_later(0.003, lambda: order.append(f"timer at {loop.time():g}"))
        await task
        await asyncio.sleep(0.01)

    with asyncio.Runner(loop_factory=controlled_loop_factory(scheduler)) as runner:
        runner.run(main())
        excused = runner.get_loop().kv_excused  # type: ignore[attr-defined]
    return tuple(order), excused


def test_a_timer_due_soon_may_fire_before_a_ready_step_under_random_only() -> None:
    """Random offers the next timer among the ready tasks (``ALL_TIMERS``): on some seeds it
    fires first, time jumps to it, and the step runs at 3 ms, the jump counted in ``kv_excused``
    (what the harness does not blame an operation for); PCT never reorders timers."""
    runs = {_order_of_a_timer_and_a_ready_step(RandomScheduler(seed=seed)) for seed in range(12)}
    orders = {order for order, _ in runs}
    assert ("step at 0.002", "timer at 0.003") in orders
    assert ("timer at 0.003", "step at 0.003") in orders  # fired while the step was ready
    assert all(excused > 0 for order, excused in runs if order[0].startswith("timer"))
    for seed in range(6):
        assert _order_of_a_timer_and_a_ready_step(PCTScheduler(seed=seed)) == (
            ("step at 0.002", "timer at 0.003"),
            0.0,
        )


def test_a_spin_beside_a_ticking_timer_still_hits_the_step_limit() -> None:
    """A task that spins with ``sleep(0)`` beside one that sleeps a millisecond at a time: the
    ticks may fire ahead of the spinner only until ``EARLY_FIRE_STEPS`` callbacks ran at one
    instant, so time stops moving and the spin is caught instead of carried to ``max_time``."""

    async def main() -> None:
        async def tick() -> None:
            while True:
                await asyncio.sleep(0.001)

        async def spin() -> None:
            while True:
                await asyncio.sleep(0)

        await asyncio.gather(tick(), spin())

    for seed in range(3):
        with pytest.raises(StepLimitExceeded):
            run_controlled(main, RandomScheduler(seed=seed), max_steps=20_000, max_time=3600.0)


def test_a_task_that_never_began_is_closed_with_the_loop() -> None:
    """A run stopped before some task began (a finding, a limit) dropped its coroutine unclosed:
    "coroutine ... was never awaited" at a later collection, in the user's output (CI's log,
    once: ``ScenarioOps.run_program``)."""

    async def work() -> None:
        await asyncio.sleep(0)

    loop = ControlledEventLoop(RandomScheduler(seed=0))
    loop.set_exception_handler(lambda _loop, _context: None)  # "Task was destroyed ..." is asyncio's
    coro = work()
    loop.create_task(coro)
    loop.close()
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are watched through /proc")
@pytest.mark.parametrize(("patience", "deadlock"), [(0.2, True), (3.0, False)])
def test_an_idle_loop_waits_its_patience_for_a_parked_thread_of_the_code_s_own(
    patience: float, deadlock: bool
) -> None:
    """A worker thread that keeps a caller's timeout is parked in a timed wait, and answers when
    it ends: a loop that waited less than that called it a deadlock (an async face over worker
    threads, under load, at the same 1 s as the worker's timeout)."""
    import threading

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.foreign_patience = patience  # type: ignore[attr-defined]
        answer = loop.create_future()

        def worker() -> None:
            time.sleep(0.6)  # parked, as in a timed wait
            with contextlib.suppress(RuntimeError):  # the loop that called it a deadlock is closed
                loop.call_soon_threadsafe(answer.set_result, "answered")

        threading.Thread(target=worker, daemon=True).start()
        return await answer

    if deadlock:
        with pytest.raises(Deadlock):
            run_controlled(main, RandomScheduler(seed=0))
        time.sleep(0.7)  # let the worker end before the next test
    else:
        assert run_controlled(main, RandomScheduler(seed=0)) == "answered"


def test_unnamed_tasks_are_named_by_their_runs_own_count() -> None:
    """asyncio's ``Task-<n>`` counts across every loop of the process: a replay's report named
    the holders ``Task-2`` where the search had said ``Task-62`` (a blind user's audit)."""

    async def main() -> list[str]:
        async def child() -> None:
            await asyncio.sleep(0)

        tasks = [asyncio.ensure_future(child()), asyncio.create_task(child(), name="mine")]
        await asyncio.gather(*tasks)
        current = asyncio.current_task()
        assert current is not None
        return [current.get_name(), *(task.get_name() for task in tasks)]

    names = []
    for _ in range(2):
        loop = ControlledEventLoop(RandomScheduler(seed=0))
        try:
            names.append(loop.run_until_complete(main()))
        finally:
            loop.close()
    assert names == [["Task-1", "Task-2", "mine"]] * 2


def test_asyncio_debug_mode_reads_no_virtual_time_as_a_slow_callback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under -X dev (asyncio's debug mode) every virtual second the loop's pump moved read as a
    slow callback: hundreds of "Executing <Handle ControlledEventLoop._kv_pump()> took 0.150
    seconds" warnings in a run (a blind team's CI)."""
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")

    async def sleepers() -> None:
        async def sleeper() -> None:
            for _ in range(5):
                await asyncio.sleep(0.2)

        await asyncio.gather(sleeper(), sleeper())

    with caplog.at_level("WARNING", logger="asyncio"):
        run_controlled(sleepers, RandomScheduler(seed=1))
    assert not [record for record in caplog.records if "Executing" in record.getMessage()]
