"""The runners: bounded calls that report a hang instead of hanging, and suspension counting."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from kvstress import _load
from kvstress.harness._runner import (
    STARVED_CAP,
    Abandoned,
    CallHung,
    LoopThread,
    Suspensions,
    ThreadWorker,
    run_on_a_thread,
    run_to_completion,
)


def test_thread_worker_returns_results_and_exceptions() -> None:
    """A worker hands back the call's result, or its exception, to the caller."""
    worker = ThreadWorker("w")
    assert worker.call(lambda: 41 + 1, 1.0) == 42
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda: 1 // 0, 1.0)
    worker.close()


def test_thread_worker_reports_a_hang_and_is_abandoned() -> None:
    """A call past its bound raises CallHung at once; the stuck daemon thread is left behind."""
    release = threading.Event()
    worker = ThreadWorker("stuck")
    start = time.monotonic()
    with pytest.raises(CallHung, match="no return within"):
        worker.call(release.wait, 0.05)
    assert time.monotonic() - start < 1.0
    assert worker.stuck
    with pytest.raises(CallHung, match="stuck in an earlier call"):
        worker.call(lambda: 1, 1.0)
    release.set()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_loop_thread_runs_sync_and_async_calls(backend: str) -> None:
    """The loop thread runs plain callables and coroutines on its event loop."""
    loop = LoopThread(backend)

    async def later() -> str:
        await anyio.sleep(0)
        return anyio.get_current_task().name or ""

    assert loop.call(lambda: 7, 1.0) == 7
    assert isinstance(loop.call(later, 1.0), str)
    loop.close()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_loop_thread_reports_a_hung_task(backend: str) -> None:
    """A task that never finishes is a CallHung after its bound."""
    loop = LoopThread(backend)
    with pytest.raises(CallHung):
        loop.call(lambda: anyio.sleep(3600), 0.05)
    assert loop.stuck


def test_loop_thread_reports_a_blocked_loop() -> None:
    """A task that blocks the whole loop (sync sleep) is a CallHung too, never a hung caller."""
    loop = LoopThread("asyncio")
    start = time.monotonic()
    with pytest.raises(CallHung):
        loop.call(lambda: time.sleep(2), 0.05)
    assert time.monotonic() - start < 1.5


def test_unknown_backend_is_a_value_error() -> None:
    """A backend anyio cannot start is reported as ValueError naming it."""
    with pytest.raises(ValueError, match="nope"):
        LoopThread("nope")


def test_suspensions_counts_each_yield() -> None:
    """Suspensions counts how often the wrapped coroutine gave control back to the loop."""

    async def three_yields() -> int:
        for _ in range(3):
            await anyio.sleep(0)
        return 5

    async def main() -> tuple[int, int]:
        counted = Suspensions(three_yields())
        result = await counted
        return result, counted.count

    assert anyio.run(main) == (5, 3)


def test_run_to_completion_refuses_a_suspending_coroutine() -> None:
    """A threaded-flavour operation must not suspend; if it does, that is a harness error."""

    async def plain() -> int:
        return 3

    class Yield:
        def __await__(self):  # type: ignore[no-untyped-def]
            yield

    async def suspends() -> None:
        await Yield()

    assert run_to_completion(plain()) == 3
    with pytest.raises(RuntimeError, match="suspended"):
        run_to_completion(suspends())


def test_run_on_a_thread_returns_the_result_or_raises_the_error() -> None:
    """A run that ends in time gives back its result, or raises what it raised."""
    assert run_on_a_thread(lambda: threading.current_thread().name, 1.0, name="kvstress-t") == "kvstress-t"
    with pytest.raises(ZeroDivisionError):
        run_on_a_thread(lambda: 1 // 0, 1.0, name="kvstress-t")


def test_run_on_a_thread_abandons_a_run_past_its_bound() -> None:
    """Past the bound the caller gets Abandoned at once; the daemon thread is left behind."""
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(Abandoned, match=r"kvstress-stuck did not finish within 0\.05 s"):
        run_on_a_thread(release.wait, 0.05, name="kvstress-stuck")
    assert time.monotonic() - start < 1.0
    release.set()


def test_run_on_a_thread_abandons_an_idle_run_before_its_bound() -> None:
    """Once idle() says nothing can end the run, it is abandoned without waiting the bound."""
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(Abandoned):
        run_on_a_thread(release.wait, 30.0, name="kvstress-idle", idle=lambda: True)
    assert time.monotonic() - start < 1.0
    release.set()


def test_run_on_a_thread_does_not_count_time_its_thread_waited_for_a_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run kept off the CPU (a loaded machine: its thread runnable on a run queue) is waited
    for past its bound, up to ``STARVED_CAP`` times it: a correct trio run starved so was
    abandoned as a hang. The starvation is scripted: the thread 'waits for a core' all along."""
    began = time.monotonic()
    monkeypatch.setattr(_load, "queued_ns", lambda native_id: int((time.monotonic() - began) * 1e9))
    assert run_on_a_thread(lambda: time.sleep(0.3) or "done", 0.1, name="kvstress-starved") == "done"
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(Abandoned):
        run_on_a_thread(release.wait, 0.05, name="kvstress-starved")
    assert 0.05 * STARVED_CAP <= time.monotonic() - start < 0.05 * STARVED_CAP + 1.0
    release.set()
