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

Where the run decides when such a call runs (``kvstress.controlled._gated``: a controlled asyncio
loop, at its scheduler's choice; a seeded trio run, after the step that hands it over), the
wrapper gates the call instead of counting it: its function waits for its turn in the worker,
and its capacity limiter tells the run when the call is handed over (``_Handing``). anyio's
call on trio goes through trio's, which then passes it on as it is. ``TrioToken.run_sync_soon``
is wrapped too, so that a gated thread handing a trio run its result ends its window.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
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
_trio_gates: dict[object, Any] = {}  # trio run (its token) -> its ThreadGates
_real_post: list[Callable[..., None]] = []  # TrioToken.run_sync_soon, while wrapped
_real_wait: list[Callable[..., bool]] = []  # threading.Condition.wait, while wrapped


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
                if name.partition(".")[0] in sys.modules and name not in sys.modules:
                    # anyio loads ``to_thread`` lazily, at its first use: a run whose code used
                    # it first ran its calls unwrapped (not at the schedule's choice, so its
                    # replay diverged)
                    with contextlib.suppress(ImportError):
                        importlib.import_module(name)
                module = sys.modules.get(name)
                if module is not None:
                    namespace = vars(module)
                    _real[name] = namespace["run_sync"]
                    namespace["run_sync"] = _counted(namespace["run_sync"])
            _real_submit.append(ThreadPoolExecutor.submit)
            ThreadPoolExecutor.submit = _counted_submit(ThreadPoolExecutor.submit)  # type: ignore[method-assign]
            _real_wait.append(threading.Condition.wait)
            threading.Condition.wait = _noted_wait(threading.Condition.wait)  # type: ignore[method-assign]
            trio = sys.modules.get("trio")
            if trio is not None:
                token_class = trio.lowlevel.TrioToken
                _real_post.append(token_class.run_sync_soon)
                token_class.run_sync_soon = _posting(token_class.run_sync_soon)
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
                real_wait = _real_wait.pop()
                if getattr(threading.Condition.wait, "__wrapped__", None) is real_wait:
                    threading.Condition.wait = real_wait  # type: ignore[method-assign]
                if _real_post:
                    real_post = _real_post.pop()
                    token_class = sys.modules["trio"].lowlevel.TrioToken
                    if getattr(token_class.run_sync_soon, "__wrapped__", None) is real_post:
                        token_class.run_sync_soon = real_post


def _noted_wait(real: Callable[..., bool]) -> Callable[..., bool]:
    """``threading.Condition.wait``, which tells the gated call whose thread waits with a timeout
    (``Event.wait``, ``Semaphore.acquire``, ``queue.Queue.get`` and ``Future.result`` with one
    too) that its window holds a real timed wait (``GatedWork.credit``)."""
    from kvstress.controlled._gated import timed_wait

    @functools.wraps(real)
    def wait(self: threading.Condition, timeout: float | None = None) -> bool:
        if timeout is not None:
            timed_wait()
        return real(self, timeout)

    return wait


def _counted_submit(real: Callable[..., Future[Any]]) -> Callable[..., Future[Any]]:
    @functools.wraps(real)
    def submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            return real(self, fn, *args, **kwargs)
        if not callable(getattr(loop, "submitted", None)) or getattr(loop, "kv_gated_submit", False):
            # not a controlled asyncio loop's thread, or a call the loop runs in turn (its own count)
            return real(self, fn, *args, **kwargs)
        loop.thread_work_begins()  # before the worker can start: see ``thread_work_begins``
        future = real(self, fn, *args, **kwargs)
        loop.submitted(future)
        return future

    return submit


def _posting(real: Callable[..., None]) -> Callable[..., None]:
    """``TrioToken.run_sync_soon``, which ends the window of a call out to a thread when that
    thread hands the run its result (``kvstress.controlled._gated``)."""

    @functools.wraps(real)
    def run_sync_soon(
        self: object, sync_fn: Callable[..., object], *args: object, idempotent: bool = False
    ) -> None:
        from kvstress.controlled._gated import work_of_this_thread

        work = work_of_this_thread()
        if work is None or getattr(work.loop, "token", None) is not self:
            real(self, sync_fn, *args, idempotent=idempotent)
            return
        # An idempotent callback is queued once however often it is posted: not wrapped.
        answering = None if idempotent else work.calling_back(sync_fn)
        real(self, sync_fn if answering is None else answering, *args, idempotent=idempotent)
        if work.posted(calls_back=answering is not None):
            work.resume()  # its next window comes once the run has its answer

    return run_sync_soon


def trio_thread_work() -> int:
    """Calls of the trio run in progress (in this thread) out in a thread now."""
    import trio

    return _trio_work.get(trio.lowlevel.current_trio_token(), 0)


def _counted(real: _AsyncFn) -> _AsyncFn:
    @functools.wraps(real)
    async def run_sync(*args: Any, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("limiter"), _Handing):
            # anyio's on trio calling trio's: the outer call is the one the run gates and counts
            return await real(*args, **kwargs)
        gated = _gated_call(real, args, kwargs)
        if gated is not None:
            work = gated[2]
            try:
                return await real(*gated[0], **gated[1])
            finally:
                work.abandon()  # a wait cancelled: work set loose is no longer counted
                if work.counted:  # a trio run's count
                    work.counted = False
                    _trio_out(work.loop.token, -1)
        with _counting():
            return await real(*args, **kwargs)

    return run_sync


def trio_gates_open(token: object, gates: object | None) -> None:
    """The trio run ``token`` runs its calls out to threads through ``gates`` (a
    ``ThreadGates``), or no longer (None)."""
    with _lock:
        if gates is None:
            _trio_gates.pop(token, None)
        else:
            _trio_gates[token] = gates


def trio_credit(token: object, seconds: float) -> None:
    """Credit the trio run ``token`` with ``seconds`` its clock moved on for real time (a gated
    call's real wait), as it is credited the time it runs with real time (``trio_real_seconds``)."""
    if token not in _trio_real:
        _trio_real.clear()  # a new run: the runs before it are over
    _trio_real.setdefault(token, [0.0, None])[0] += seconds


def trio_work_out(token: object, change: int) -> None:
    """Count a call out in a thread (+1) or back (-1) for the trio run ``token`` (its thread)."""
    _trio_out(token, change)


def _gated_call(
    real: _AsyncFn, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], Any] | None:
    """The arguments for ``run_sync`` where the run decides when the call runs (a controlled
    asyncio loop: at its scheduler's choice; a seeded trio run: right after the step that hands
    it over; ``kvstress.controlled._gated``): the function wrapped to wait for its turn, and the
    capacity limiter wrapped to tell the run when the call is handed to its thread (once a
    token is held: a call waiting for one is not handed yet). None elsewhere."""
    if not args or not callable(args[0]):
        return None
    library = getattr(real, "__module__", "").partition(".")[0]
    host = run_host("gated_work")
    if host is None:
        return None
    from kvstress.controlled._gated import call_name

    work = host.gated_work(call_name(args[0]))
    if work is None:
        return None
    limiter = kwargs.get("limiter")
    if limiter is None and library == "anyio" and isinstance(host, asyncio.AbstractEventLoop):
        import anyio.to_thread

        limiter = anyio.to_thread.current_default_thread_limiter()
    elif limiter is None:  # trio's, or anyio's on trio (which hands None on to trio's)
        import trio.to_thread

        limiter = trio.to_thread.current_default_thread_limiter()
    return (work.wrap(args[0]), *args[1:]), {**kwargs, "limiter": _Handing(limiter, host, work)}, work


class _Handing:
    """A capacity limiter that tells the loop a call is handed to its thread once it holds a
    token (anyio puts the call on its worker's queue in the same step)."""

    def __init__(self, limiter: Any, loop: Any, work: Any) -> None:
        self._limiter, self._loop, self._work = limiter, loop, work

    async def __aenter__(self) -> None:
        await self._limiter.__aenter__()
        self._loop.hand(self._work)

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        """trio's way in: it starts the call's thread in the same step."""
        await self._limiter.acquire_on_behalf_of(borrower)
        self._loop.hand(self._work)

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        result: bool | None = await self._limiter.__aexit__(*exc_info)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._limiter, name)


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


def run_host(member: str) -> Any | None:
    """What runs the caller's controlled run, where it has ``member`` (``gated_work``,
    ``expect_offer``): the controlled asyncio loop, or the seeded trio run's ``ThreadGates``; None
    elsewhere (a thread, a stock loop)."""
    try:
        host: Any = asyncio.get_running_loop()
    except RuntimeError:
        token = _trio_token()
        with _lock:
            host = _trio_gates.get(token) if token is not None else None
    return host if host is not None and callable(getattr(host, member, None)) else None


def _trio_token() -> object | None:
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        token: object = trio.lowlevel.current_trio_token()
    except RuntimeError:  # not in a trio run
        return None
    return token
