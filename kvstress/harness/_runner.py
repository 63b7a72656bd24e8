"""Where the pool's code runs during a check: a daemon thread per holder, or one event loop thread.

The harness itself never waits without a bound: every call goes to another thread and is waited
for with a timeout. A call that overruns is reported as a hang and its thread is abandoned
(daemon threads never keep the process alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import anyio
import anyio.from_thread

from kvstress._load import STARVED_CAP as STARVED_CAP
from kvstress._load import RunnableClock
from kvstress.controlled._loop import contended_step

T = TypeVar("T")


class CallHung(Exception):
    """A call did not finish within its bound; the thread that ran it is abandoned."""


class Abandoned(Exception):
    """``run_on_a_thread``: the run outlived its bound, and its thread is left to itself."""


def run_on_a_thread(
    fn: Callable[[], T],
    bound: float,
    *,
    name: str,
    idle: Callable[[], bool] | None = None,
    interrupt_grace: float = 2.0,
) -> T:
    """``fn()`` on a daemon thread of its own, waited for at most ``bound`` seconds: its result,
    or what it raised. Past the bound, or as soon as ``idle()`` says that nothing can end the
    run any more, the thread is abandoned and Abandoned is raised.

    The bound counts the time the thread ran or waited on purpose, not the time the OS kept it
    waiting for a core (``RunnableClock``), up to ``STARVED_CAP`` times the bound of wall time:
    a correct trio run starved on a loaded machine was abandoned as a hang.

    On Ctrl-C the thread gets ``interrupt_grace`` seconds to end before the interrupt goes on:
    a daemon thread still inside torch when the interpreter exits aborts the process.
    """
    outcome: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(fn())
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    clock = RunnableClock(thread.native_id)
    try:
        while thread.is_alive() and not clock.past(bound):
            thread.join(min(0.01 if idle is not None else 0.05, bound))
            if idle is not None and idle():
                thread.join(0.05)  # a cancellation may still end it cleanly
                break
    except KeyboardInterrupt:
        thread.join(interrupt_grace)
        raise
    if thread.is_alive():
        raise Abandoned(f"{name} did not finish within {bound:g} s")
    if errors:
        raise errors[0]
    return outcome[0]


def run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never really suspends (the threaded flavour's ops) on this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a threaded-pool operation suspended; it must not await anything")


class ThreadWorker:
    """A daemon thread that runs one holder's calls, one at a time, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stuck = False
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=f"kvstress-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn`` to run on this worker's thread."""
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        return future

    def call(self, fn: Callable[[], T], bound: float) -> T:
        """Run ``fn`` on the worker and wait at most ``bound`` seconds; CallHung past that."""
        if self.stuck:
            raise CallHung(f"worker {self.name} is stuck in an earlier call")
        future = self.submit(fn)
        try:
            return future.result(timeout=bound)
        except FutureTimeout:
            self.stuck = True
            raise CallHung(f"{self.name}: no return within {bound:.3g} s") from None

    def close(self) -> None:
        """Let the thread end once its queue is empty (a stuck thread is simply left behind)."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the waiting caller, never lost
                future.set_exception(exc)


class LoopThread:
    """An anyio event loop (asyncio or trio) in a daemon thread, alive for a whole example."""

    def __init__(
        self,
        backend: str,
        backend_options: dict[str, Any] | None = None,
        on_error: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """``on_error``, on asyncio, is given what the loop's exception handler is (an exception
        in a task nobody awaited, or in a callback); where it answers False, the loop's default
        handler logs it as usual."""
        self.backend = backend
        self.stuck = False
        self._on_error = on_error
        self._ready = threading.Event()
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._serve, args=(backend_options or {},), name=f"kvstress-{backend}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the {backend} event loop did not start")
        if self._error is not None:
            raise ValueError(f"backend {backend!r} cannot start: {self._error}") from self._error

    def call(self, fn: Callable[[], Any], bound: float) -> Any:
        """Run ``fn`` (sync, or async and awaited) as a task in the loop; CallHung past ``bound``."""
        if self.stuck or self._portal is None:
            raise CallHung("the event loop is stuck in an earlier call")
        future: Future[Any] = self._portal.start_task_soon(self._as_task, fn)
        try:
            return future.result(timeout=bound)
        except FutureTimeout:
            future.cancel()  # cancels the task, if the loop still runs
            with contextlib.suppress(BaseException):
                future.result(timeout=0.5)
            self.stuck = True
            raise CallHung(f"{self.backend} task: no return within {bound:.3g} s") from None

    def close(self) -> None:
        """Stop the loop (unless it is stuck, in which case its thread is abandoned)."""
        if self._portal is not None and not self.stuck:
            with contextlib.suppress(Exception):  # the loop is already gone
                self._portal.call(self._portal.stop)
            self._thread.join(5)

    @staticmethod
    async def _as_task(fn: Callable[[], Awaitable[T] | T]) -> T:
        result = fn()
        if isinstance(result, Awaitable):
            return await result
        return result

    def _serve(self, backend_options: dict[str, Any]) -> None:
        async def serve() -> None:
            if self._on_error is not None and self.backend == "asyncio":
                asyncio.get_running_loop().set_exception_handler(self._caught)
            async with anyio.from_thread.BlockingPortal() as portal:
                self._portal = portal
                self._ready.set()
                await portal.sleep_until_stopped()

        try:
            anyio.run(serve, backend=self.backend, backend_options=backend_options)
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def _caught(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        assert self._on_error is not None
        if not self._on_error(context):
            loop.default_exception_handler(context)


class Suspensions:
    """Wraps a coroutine and counts how often it is woken (to tell parking from spinning); on a
    controlled loop, not a wake-up chosen over another ready task or callback: the loop was busy
    then, and the wait no spin (``contended_step``)."""

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self.count = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value, error = self._coro, None, None
        try:
            loop: object = asyncio.get_running_loop()  # once: it is the same at every wake-up
        except RuntimeError:  # trio
            loop = None
        while True:
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                return done.value
            value, error = None, None
            try:
                value = yield yielded
            except BaseException as exc:  # cancellation and the like go to the pool's code
                error = exc
            if not contended_step(loop):
                self.count += 1
