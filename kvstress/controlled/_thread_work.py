"""Work a controlled run hands to threads by means its loop cannot see: anyio's and trio's.

A controlled asyncio loop waits in real time for work out in a thread before it moves virtual
time (a thread's work takes no virtual time); it knows of ``run_in_executor`` (and so
``asyncio.to_thread``) by its own method. ``anyio.to_thread.run_sync`` runs its function on
anyio's own worker threads instead: a timeout around it fired at once on virtual time, and a
wait for it with no timer was called a deadlock, on correct code. On trio, a run waiting for
``trio.to_thread.run_sync`` looks idle (every task blocked, the clock still), and the harness
took it for a run blocked for good.

Code may also submit work to a ``concurrent.futures.ThreadPoolExecutor`` of its own and have the
worker hand its result back with ``call_soon_threadsafe`` (a reset that offers its block back):
the loop moved virtual time past a quiet check while the worker was zeroing, and a correct pool
was reported as losing the block. So ``ThreadPoolExecutor.submit`` is wrapped too: a submission
made on a controlled loop's thread is counted by the loop (``submitted``) until it is done.

So while a controlled run goes on, ``anyio.to_thread.run_sync`` and ``trio.to_thread.run_sync``
(the public functions, looked up on their modules by callers, anyio's own file and DNS helpers
included) are wrapped. On a controlled asyncio loop a call is counted by the loop
(``thread_work``) until it is back; in a trio run it is counted per run (``trio_thread_work``);
anywhere else the wrapper is the function itself. The wrappers are put in place when the first
controlled run starts and taken out when the last one ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

_AsyncFn = Callable[..., Coroutine[Any, Any, Any]]
_WRAPPED = ("anyio.to_thread", "trio.to_thread")  # modules whose ``run_sync`` is wrapped

_lock = threading.Lock()
_running = 0  # controlled runs going on now, in any thread
_real: dict[str, _AsyncFn] = {}  # module name -> its run_sync, while wrapped
_trio_work: dict[object, int] = {}  # trio run (its token) -> calls out in threads
_trio_jumps: dict[object, tuple[float, float]] = {}  # trio run -> its MockClock's autojump, rate
_trio_real: dict[object, list[Any]] = {}  # trio run -> [seconds its clock ran with real time, since when]
_trio_clocks_out: dict[object, Any] = {}  # trio run with work out in threads -> its clock
_real_submit: list[Callable[..., Future[Any]]] = []  # ThreadPoolExecutor.submit, while wrapped


class _CountsThreadWork(Protocol):
    def thread_work(self) -> contextlib.AbstractContextManager[None]: ...


@contextlib.contextmanager
def following_thread_work() -> Iterator[None]:
    """While the block runs, anyio's and trio's ``to_thread.run_sync`` count their calls."""
    global _running
    with _lock:
        _running += 1
        if _running == 1:
            for name in _WRAPPED:
                module = sys.modules.get(name)
                if module is not None:
                    namespace = vars(module)
                    _real[name] = namespace["run_sync"]
                    namespace["run_sync"] = _counted(namespace["run_sync"])
            _real_submit.append(ThreadPoolExecutor.submit)
            ThreadPoolExecutor.submit = _counted_submit(ThreadPoolExecutor.submit)  # type: ignore[method-assign]
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if not _running:
                for name, real in _real.items():
                    namespace = vars(sys.modules[name])
                    if getattr(namespace.get("run_sync"), "__wrapped__", None) is real:
                        namespace["run_sync"] = real
                _real.clear()
                real_submit = _real_submit.pop()
                if getattr(ThreadPoolExecutor.submit, "__wrapped__", None) is real_submit:
                    ThreadPoolExecutor.submit = real_submit  # type: ignore[method-assign]


def _counted_submit(real: Callable[..., Future[Any]]) -> Callable[..., Future[Any]]:
    @functools.wraps(real)
    def submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            return real(self, fn, *args, **kwargs)
        if not callable(getattr(loop, "submitted", None)):  # not a controlled asyncio loop's thread
            return real(self, fn, *args, **kwargs)
        loop.thread_work_begins()  # before the worker can start: see ``thread_work_begins``
        future = real(self, fn, *args, **kwargs)
        loop.submitted(future)
        return future

    return submit


def trio_thread_work() -> int:
    """Calls of the trio run in progress (in this thread) out in a thread now."""
    import trio

    return _trio_work.get(trio.lowlevel.current_trio_token(), 0)


def _counted(real: _AsyncFn) -> _AsyncFn:
    @functools.wraps(real)
    async def run_sync(*args: Any, **kwargs: Any) -> Any:
        with _counting():
            return await real(*args, **kwargs)

    return run_sync


@contextlib.contextmanager
def _counting() -> Iterator[None]:
    """Count the block as work out in a thread, for the controlled run it is part of."""
    try:
        loop: Any = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if callable(getattr(loop, "thread_work", None)):  # a controlled asyncio loop
        counting: _CountsThreadWork = loop
        with counting.thread_work():
            yield
        return
    token = _trio_token()
    if token is None:
        yield
        return
    _trio_out(token, +1)
    try:
        yield
    finally:
        _trio_out(token, -1)


def _trio_out(token: object, change: int) -> None:
    """Count a call out (+1) or back (-1). While any is out, a ``MockClock`` does not jump
    (a jump to the next deadline would fire it while the thread works) and runs with real time
    (the thread works and waits on the real clock: a thread that kept a caller's 0.2 s timeout
    answered after 0 s of virtual time, timeout-early, and a ``fail_after`` around a thread's
    wait never fired, a hang; blind users' correct pools): the first out turns its autojump
    off and its rate to 1, the last back restores both. Runs in the trio run's own thread."""
    with _lock:
        before = _trio_work.get(token, 0)
        after = before + change
        if after:
            _trio_work[token] = after
        else:
            _trio_work.pop(token, None)
        if before == 0:
            _trio_clocks_out[token] = _current_clock()
        elif after == 0:
            _trio_clocks_out.pop(token, None)
    clock = _mock_clock()
    if clock is None:
        return
    if before == 0:
        if token not in _trio_real:
            _trio_real.clear()  # a new run: the runs before it are over
        # Read while the clock stands still, before it runs and after it stops: the credit is
        # exactly the virtual time it ran, on the clock the checks measure with.
        _trio_real.setdefault(token, [0.0, None])[1] = clock.current_time()
        _trio_jumps[token] = (clock.autojump_threshold, clock.rate)
        clock.autojump_threshold = math.inf
        clock.rate = 1.0
    elif after == 0:
        saved = _trio_jumps.pop(token, (clock.autojump_threshold, clock.rate))
        clock.autojump_threshold, clock.rate = saved
        followed = _trio_real.get(token)
        if followed is not None and followed[1] is not None:
            followed[0] += clock.current_time() - followed[1]
            followed[1] = None


def trio_real_seconds() -> float:
    """Seconds the trio run in progress (in this thread) has let its clock run with real time,
    while work was out in threads (``_trio_out``): real time comes with a real clock's jitter (a
    timed wait ends a fraction of a millisecond late), which the checks credit to the operations
    in flight, as a controlled asyncio loop's ``kv_excused``. 0.0 outside a trio run."""
    token = _trio_token()
    followed = _trio_real.get(token) if token is not None else None
    if followed is None:
        return 0.0
    total, since = float(followed[0]), followed[1]
    clock = _mock_clock() if since is not None else None
    return total + (float(clock.current_time()) - since if clock is not None else 0.0)


def trio_clock_elsewhere() -> float | None:
    """The clock of the trio run that has work out in threads, read from any thread (a worker
    waits until a deadline its task computed on that clock: in a real process one clock, and
    the worker read the real one and saw the deadline long past); None unless exactly one run
    has work out (two runs' clocks are not one, and a thread cannot tell whose it is)."""
    with _lock:
        clocks = list(_trio_clocks_out.values())
    return float(clocks[0].current_time()) if len(clocks) == 1 else None


def _current_clock() -> Any:
    import trio

    return trio.lowlevel.current_clock()


def _mock_clock() -> Any:
    """The trio run's clock if it is a ``MockClock`` (virtual time that jumps), else None."""
    import trio.testing

    clock = _current_clock()
    return clock if isinstance(clock, trio.testing.MockClock) else None


def _trio_token() -> object | None:
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        token: object = trio.lowlevel.current_trio_token()
    except RuntimeError:  # not in a trio run
        return None
    return token
