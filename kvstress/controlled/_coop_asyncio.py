"""asyncio event loops that the code under test runs in controlled threads.

A threaded pool may keep its state on an event loop of its own, run by a thread of its own, and
let its callers submit coroutines there (``asyncio.run_coroutine_threadsafe(...).result()``): a
synchronous front over an asynchronous core. Under the baton the stock loop waits in a real
selector and its callers on a real ``concurrent.futures.Future``: the loop's thread held the
baton in ``epoll`` while no caller could run, and a correct pool was reported as a hang.

The loops made here wait cooperatively in a controlled thread (their selector is one of
``_coop_io``'s: the self-pipe that ``call_soon_threadsafe`` writes to is polled at each
decision, a timer's wait is on virtual time) and read the virtual clock there, so their timers
fire with the other threads' sleeps; ``run_coroutine_threadsafe`` hands back a cooperative
future, whose waiter parks on the baton. Outside a controlled thread each behaves as the
standard library's. The loop's own machinery is not traced: a coroutine's lines are scheduling
points where its module is the code under test, as any thread's are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time as _time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kvstress.controlled import _coop, _coop_futures
from kvstress.controlled._coop_io import SELECTORS

T = TypeVar("T")


class SelectorEventLoop(asyncio.SelectorEventLoop):
    """``asyncio.SelectorEventLoop`` whose waits are cooperative, and whose clock is the virtual
    one, in a controlled thread (a stock loop, and the real clock, anywhere else)."""

    def __init__(self, selector: Any = None) -> None:
        super().__init__(SELECTORS["DefaultSelector"]() if selector is None else selector)

    _kv_executor: _coop_futures.ThreadPoolExecutor | None = None
    _kv_default_set = False

    def time(self) -> float:
        _, me = _coop._here()
        return _time.monotonic() if me is None else _coop.monotonic()

    def set_default_executor(self, executor: Any) -> None:
        self._kv_default_set = True
        super().set_default_executor(executor)

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:  # type: ignore[override]
        """``run_in_executor``; in a controlled thread the default executor (``to_thread``'s) is a
        cooperative one, whose workers are controlled threads: the stock one's real workers ran
        beside the schedule, and the loop joined them at its end from a real thread of its own,
        which cannot wait on the baton (a blind user's ``asyncio.run`` of a ``to_thread``)."""
        if executor is None and not self._kv_default_set and _coop._here()[1] is not None:
            if self._kv_executor is None:
                self._kv_executor = _coop_futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
            executor = self._kv_executor
        return super().run_in_executor(executor, func, *args)

    async def shutdown_default_executor(self, *args: Any, **kwargs: Any) -> None:
        """The cooperative default executor is shut down here, its workers joined on the baton."""
        executor, self._kv_executor = self._kv_executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        await super().shutdown_default_executor(*args, **kwargs)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.new_event_loop()``: a loop that waits cooperatively in a controlled thread."""
    return SelectorEventLoop()


def Runner(
    *, debug: bool | None = None, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
) -> asyncio.Runner:
    """``asyncio.Runner``, whose loop (unless a factory is given) is ``new_event_loop``'s."""
    return asyncio.Runner(debug=debug, loop_factory=loop_factory or new_event_loop)


def run(
    main: Coroutine[Any, Any, T],
    *,
    debug: bool | None = None,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """``asyncio.run`` on a loop that waits cooperatively in a controlled thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        main.close()
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    with Runner(debug=debug, loop_factory=loop_factory) as runner:
        return runner.run(main)


def run_coroutine_threadsafe(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop
) -> concurrent.futures.Future[T]:
    """``asyncio.run_coroutine_threadsafe``: ``coro`` becomes a task of ``loop``, and its outcome
    reaches a cooperative future where a controlled thread submits it (its caller waits there),
    a real one elsewhere. As the standard library's: cancelling the future cancels the task, and
    a result that comes after the future was cancelled is dropped."""
    if _coop._here()[1] is None:
        return asyncio.run_coroutine_threadsafe(coro, loop)
    if not asyncio.iscoroutine(coro):
        raise TypeError("A coroutine object is required")
    future = _coop_futures.Future()

    def start() -> None:
        try:
            task = asyncio.ensure_future(coro, loop=loop)
        except BaseException as error:
            if future.set_running_or_notify_cancel():
                future.set_exception(error)
            raise

        def cancel_task(done: concurrent.futures.Future[Any]) -> None:
            if done.cancelled():
                loop.call_soon_threadsafe(task.cancel)

        def settle(done: asyncio.Future[T]) -> None:
            if done.cancelled():
                future.cancel()
            if not future.set_running_or_notify_cancel():
                return  # cancelled: the outcome is dropped
            error = done.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result())

        future.add_done_callback(cancel_task)
        task.add_done_callback(settle)

    loop.call_soon_threadsafe(start)
    return future


ASYNCIO: dict[str, Any] = {
    "SelectorEventLoop": SelectorEventLoop,
    "new_event_loop": new_event_loop,
    "Runner": Runner,
    "run": run,
    "run_coroutine_threadsafe": run_coroutine_threadsafe,
}
"""The ``asyncio`` names a threaded pool makes and drives its own loop with, made cooperative."""
