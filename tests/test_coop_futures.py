"""``concurrent.futures`` on the baton: a thread executor's work runs in controlled threads, on
virtual time, with the standard library's interface and errors.

A pool that hands its reset to a ``ThreadPoolExecutor`` and returns was reported as losing a
block: the real executor's thread ran where the scheduler could not see it, so no quiet check
ever saw the offer (PCT, 0.04 s). ``ExecutorResetThreadPool`` in the corpus is that pool.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import kvstress
from kvstress.controlled import _coop_futures, run_threads
from kvstress.mutants import ExecutorResetThreadPool, ExecutorResetUnlockedOfferPool
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler


def run(main: Callable[[], Any], seed: int = 0) -> Any:
    """``main()`` as one controlled execution with this module traced and patched."""
    return run_threads(main, RandomScheduler(seed=seed), modules=[__name__])


@pytest.mark.parametrize("seed", range(5))
def test_submitted_work_runs_in_controlled_threads_and_results_come_back(seed: int) -> None:
    def main() -> tuple[list[Any], bool, str]:
        with ThreadPoolExecutor(max_workers=2) as executor:
            assert isinstance(executor, _coop_futures.ThreadPoolExecutor)
            futures = [executor.submit(lambda i=i: i * i) for i in range(5)]
            failing = executor.submit(lambda: 1 // 0)
            results = [f.result() for f in futures]
            with pytest.raises(ZeroDivisionError):
                failing.result()
            mapped = list(executor.map(lambda a, b: a + b, [1, 2], [10, 20]))
        return [*results, *mapped], failing.done(), type(failing.exception()).__name__

    results, done, raised = run(main, seed)
    assert results == [0, 1, 4, 9, 16, 11, 22] and done and raised == "ZeroDivisionError"


def test_a_result_waits_on_virtual_time_and_times_out() -> None:
    """A result that takes 5 virtual seconds: ``result(1)`` times out at once in real time."""

    def main() -> tuple[str, Any, float]:
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = executor.submit(lambda: time.sleep(5) or "late")
        start = time.monotonic()
        try:
            future.result(timeout=1)
            outcome = "no timeout"
        except TimeoutError:
            outcome = "timeout"
        waited = time.monotonic() - start
        executor.shutdown(wait=True)
        return outcome, future.result(), waited

    started = time.perf_counter()
    outcome, result, waited = run(main)
    assert (outcome, result) == ("timeout", "late") and waited == pytest.approx(1.0)
    assert time.perf_counter() - started < 3.0  # virtual seconds, not real ones


def test_queued_work_can_be_cancelled_and_shutdown_cancels_the_rest() -> None:
    def main() -> tuple[bool, bool, bool, list[str]]:
        gate = threading.Event()
        ran: list[str] = []
        executor = ThreadPoolExecutor(max_workers=1)
        first = executor.submit(lambda: gate.wait() and ran.append("first"))
        second = executor.submit(ran.append, "second")
        third = executor.submit(ran.append, "third")
        cancelled = second.cancel()
        gate.set()
        executor.shutdown(wait=True, cancel_futures=True)
        with pytest.raises(concurrent.futures.CancelledError):
            second.result()
        with pytest.raises(RuntimeError, match="after shutdown"):
            executor.submit(ran.append, "late")
        return cancelled, first.done(), third.done(), ran

    cancelled, first_done, third_done, ran = run(main)
    assert cancelled and first_done and third_done and ran[0] == "first" and "second" not in ran


@pytest.mark.parametrize("seed", range(5))
def test_wait_and_as_completed(seed: int) -> None:
    def main() -> tuple[int, int, list[int]]:
        with ThreadPoolExecutor(max_workers=3) as executor:
            futures = [executor.submit(lambda s=s: time.sleep(s) or s) for s in (3, 1, 2)]
            done, not_done = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
            order = [f.result() for f in concurrent.futures.as_completed(futures)]
        return len(done), len(not_done), order

    first, rest, order = run(main, seed)
    assert (first, rest) == (1, 2) and order[0] == 1 and sorted(order) == [1, 2, 3]


def test_a_callback_runs_once_the_future_is_done() -> None:
    def main() -> list[Any]:
        seen: list[Any] = []
        with ThreadPoolExecutor() as executor:
            future = executor.submit(lambda: 42)
            future.add_done_callback(lambda f: seen.append(f.result()))
            future.result()
        future.add_done_callback(lambda f: seen.append("late"))  # done already: runs at once
        return seen

    assert run(main) == [42, "late"]


@pytest.mark.parametrize("scheduler", [PCTScheduler, RandomScheduler], ids=["pct", "random"])
def test_a_pool_that_resets_on_an_executor_is_clean(scheduler: type) -> None:
    config = ScenarioConfig(ExecutorResetThreadPool, False)
    result = search(config, scheduler(seed=1), max_executions=150, shrink=False)
    assert result.failure is None, result.failure.describe()


def test_a_planted_bug_in_the_executor_s_offer_is_found() -> None:
    config = ScenarioConfig(ExecutorResetUnlockedOfferPool, False)
    result = search(config, PCTScheduler(seed=0), max_executions=300, shrink=False)
    assert result.failure is not None
    assert result.failure.violation.invariant in ExecutorResetUnlockedOfferPool.expected


def _leaky_request(pool: Any, blocks: int, timeout: float) -> None:
    """A request handler that keeps what it took when a later acquire times out."""
    got = []
    for _ in range(blocks):
        block = pool.acquire(timeout)
        if block is None:
            return  # BUG: got is never given back
        got.append(block)
    time.sleep(0.01)  # decode
    for block in got:
        pool.release(block)


def test_an_explored_executor_test_finds_a_leak_and_shows_where_the_user_took_the_block() -> None:
    """A serving loop on an executor, explored: the leak is found, and its acquire stack ends in
    the user's handler, with kvstress's controlled-thread frames left out."""

    def serve() -> None:
        audited = kvstress.audit(kvstress.ThreadedBlockPool(3, (2, 4)))
        with audited as pool, ThreadPoolExecutor(max_workers=3) as executor:  # the executor ends first
            for blocks in (2, 2, 1):
                executor.submit(_leaky_request, pool, blocks, 0.015)

    with pytest.raises(kvstress.InvariantViolation) as caught:
        kvstress.explore(serve, schedules=300, seed=0)
    message = str(caught.value)
    assert caught.value.invariant == "lost-block"
    assert "in _leaky_request" in message and "kvstress/controlled" not in message


def test_a_cooperative_future_reads_as_the_standard_librarys() -> None:
    """A message about the code's future (an InvalidStateError, a crash report) names a Future,
    as the standard library writes one, not kvstress's stand-in."""
    real, stand_in = concurrent.futures.Future(), _coop_futures.Future()
    for future in (real, stand_in):
        future.set_result(3)
    shown = [repr(f).split(" at ")[0] + repr(f).split(" state=")[1] for f in (real, stand_in)]
    assert shown[0] == shown[1] == "<Futurefinished returned int>"
    with pytest.raises(concurrent.futures.InvalidStateError, match="FINISHED: <Future at"):
        stand_in.set_result(4)
    failed = _coop_futures.Future()
    failed.set_exception(KeyError("x"))
    assert repr(failed).endswith("state=finished raised KeyError>")
    assert repr(_coop_futures.Future()).endswith("state=pending>")
