"""asyncio event loops run by controlled threads: a synchronous front over an asynchronous core.

A threaded pool whose allocator is an event loop in a thread of its own, its callers waiting on
``asyncio.run_coroutine_threadsafe(...).result()``, was reported as a hang on the first
schedule: the stock loop waited in a real ``epoll`` holding the baton, and the callers on a real
``concurrent.futures.Future`` (a blind user's pool, correct). Loops made in the code under test
now wait on the baton and read the virtual clock; its futures are cooperative.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import pytest
from pools.loop_thread import AsyncioRunThreadPool, LoopThreadDroppedResultPool, LoopThreadPool

from kvstress.controlled import _coop_asyncio, _coop_futures, run_threads
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler, Scheduler


@pytest.mark.parametrize("factory", [LoopThreadPool, AsyncioRunThreadPool], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "scheduler", [RandomScheduler(seed=3), PCTScheduler(depth=3, seed=3)], ids=["random", "pct"]
)
def test_a_pool_on_its_own_event_loop_thread_is_clean(factory: type, scheduler: Scheduler) -> None:
    result = search(ScenarioConfig(factory, False), scheduler, max_executions=60)
    assert result.failure is None, result.failure.describe()


@pytest.mark.parametrize("seed", range(3))
def test_a_result_dropped_by_a_cancelled_future_is_found(seed: int) -> None:
    """The caller times out on ``future.result(timeout)`` and cancels it just as the loop gave
    its request a block: the block is lost (random: 11-85 executions on seeds 0-2)."""
    config = ScenarioConfig(LoopThreadDroppedResultPool, False)
    result = search(config, RandomScheduler(seed=seed), max_executions=400, shrink=False)
    assert result.failure is not None
    assert result.failure.violation.invariant == "lost-block"


def run(main: Any, seed: int = 0) -> Any:
    return run_threads(main, RandomScheduler(seed=seed), modules=[__name__])


def test_a_loop_in_a_controlled_thread_sleeps_on_virtual_time() -> None:
    """``asyncio.run`` of a 30 s sleep, and a timer on a loop run by another thread: both take
    no real time, and both read the virtual clock."""

    def main() -> tuple[float, float, str]:
        start = time.monotonic()
        asyncio.run(asyncio.sleep(30))
        slept = time.monotonic() - start
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()

        async def later() -> str:
            await asyncio.sleep(2)
            return "late"

        start = time.monotonic()
        answer = asyncio.run_coroutine_threadsafe(later(), loop).result()
        waited = time.monotonic() - start
        loop.call_soon_threadsafe(loop.stop)
        return slept, waited, answer

    began = time.perf_counter()
    slept, waited, answer = run(main)
    assert slept >= 30 and waited >= 2 and answer == "late"
    assert time.perf_counter() - began < 10  # virtual seconds, not real ones


def test_a_caller_times_out_on_virtual_time_and_its_cancel_reaches_the_task() -> None:
    """The standard library's outcomes from a cooperative future: a timeout (virtual), a cancel
    that reaches the task, an exception, and ``wrap_future`` takes the future."""

    async def fail() -> None:
        raise KeyError("no block")

    def main() -> tuple[str, bool, str]:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        cancelled = threading.Event()

        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        future = asyncio.run_coroutine_threadsafe(forever(), loop)
        try:
            future.result(timeout=1)
            outcome = "no timeout"
        except TimeoutError:
            outcome = "timeout"
        future.cancel()
        seen = cancelled.wait(timeout=5)
        failing = asyncio.run_coroutine_threadsafe(fail(), loop)
        assert isinstance(failing, concurrent.futures.Future)
        assert isinstance(failing, _coop_futures.Future)
        try:
            failing.result()
            raised = "nothing"
        except KeyError:
            raised = "KeyError"
        loop.call_soon_threadsafe(loop.stop)
        return outcome, seen, raised

    assert run(main) == ("timeout", True, "KeyError")


def test_outside_a_controlled_thread_the_stand_ins_are_the_standard_library() -> None:
    """A cooperative loop and future in an ordinary thread: real time, real waits, and the
    standard library's outcomes (a result, an exception, a cancel that reaches the task, a
    result that comes after a cancel dropped)."""
    loop = _coop_asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        assert abs(loop.time() - time.monotonic()) < 1

        async def answer(value: int) -> int:
            await asyncio.sleep(0.001)
            return value

        async def fail() -> None:
            raise KeyError("no block")

        future = _coop_asyncio.run_coroutine_threadsafe(answer(7), loop)
        assert type(future) is concurrent.futures.Future  # the caller waits outside the baton
        assert future.result(timeout=5) == 7
        with pytest.raises(KeyError):
            _coop_asyncio.run_coroutine_threadsafe(fail(), loop).result(timeout=5)
        started = threading.Event()

        async def slow() -> None:
            started.set()
            await asyncio.sleep(3600)

        slow_future = _coop_asyncio.run_coroutine_threadsafe(slow(), loop)
        assert started.wait(5)
        assert slow_future.cancel()
        with pytest.raises(concurrent.futures.CancelledError):
            slow_future.result(timeout=5)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_cooperative_future_is_a_concurrent_future_to_asyncio() -> None:
    """``asyncio.wrap_future`` (an async front over a thread) takes a cooperative future."""

    async def main() -> int:
        future = _coop_futures.Future()
        wrapped = asyncio.wrap_future(future)
        future.set_result(11)
        return await wrapped

    assert asyncio.run(main()) == 11


def test_asyncio_run_refuses_a_running_loop_as_the_standard_library_does() -> None:
    async def inner() -> None:
        coroutine = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="running event loop"):
            _coop_asyncio.run(coroutine)

    asyncio.run(inner())


def test_asyncio_run_of_to_thread_in_an_explored_plain_test() -> None:
    """``asyncio.run`` of a ``to_thread`` inside a plain explored function: the default
    executor's workers were real threads, joined at the loop's end from a real thread of the
    loop's own, which cannot wait on the baton ("joining asyncio_0 outside a controlled thread
    would wait forever", a blind user's). Its workers are controlled threads now."""
    import kvstress

    def main() -> None:
        async def inner() -> int:
            return await asyncio.to_thread(lambda: 7)

        assert asyncio.run(inner()) == 7

    assert "explored 20 schedules" in str(kvstress.explore(main, schedules=20, seed=0))


def test_a_thread_outside_the_run_that_wakes_a_controlled_one_is_waited_for() -> None:
    """anyio's blocking portal runs its event loop in a thread of anyio's own, which kvstress
    does not control: the explored test's main thread, waiting on the portal's future, was a
    deadlock at schedule 1 (a blind user's). With no controlled thread runnable, the baton waits
    for such a thread while it is at work."""
    import anyio.from_thread

    import kvstress

    async def double(value: int) -> int:
        return 2 * value

    def main() -> None:
        with anyio.from_thread.start_blocking_portal() as portal:
            assert portal.call(double, 21) == 42

    assert "explored 10 schedules" in str(kvstress.explore(main, schedules=10, seed=0))


def test_a_deadlock_beside_a_thread_outside_the_run_names_it() -> None:
    """A wait that such a thread never answers is still a deadlock, and its message names the
    thread the schedule cannot see."""
    from kvstress.controlled import ThreadDeadlock

    release = threading.Event()
    outside = threading.Thread(target=release.wait, name="library-worker", daemon=True)  # a real one

    def main() -> None:
        outside.start()  # started during the run, by code kvstress does not control
        threading.Event().wait()  # a cooperative event nobody sets

    try:
        with pytest.raises(ThreadDeadlock, match="not controlled by it, still running: library-worker"):
            run_threads(main, RandomScheduler(seed=0), modules=[__name__])
    finally:
        release.set()


def test_a_switch_in_the_pools_own_thread_says_so() -> None:
    """A switch point in the pool's own loop thread read "pool-loop between operations", though
    that thread runs no harness operation (a blind user's report)."""
    from kvstress.scenarios._switches import record_switches

    config = ScenarioConfig(LoopThreadDroppedResultPool, False)
    found = search(config, RandomScheduler(seed=1), max_executions=400, shrink=False)
    assert found.failure is not None
    switches = record_switches(config, found.failure.schedule)
    assert switches is not None
    own = [s for s in switches if s.worker == "pool-loop"]
    assert own and all(s.pools_own for s in own)
    assert "pool-loop (a thread or task of the pool's own), paused at" in own[0].describe()
    assert not any(s.pools_own for s in switches if s.worker != "pool-loop")
