"""Run one test function under schedule after schedule: on the controlled loop, or on the baton.

An async function runs on a fresh ``ControlledEventLoop`` per schedule (virtual time); a plain
function runs as controlled thread 0 and the threads it starts take turns with it. Either way
the search stops at the first schedule whose run raises one of ``failure_types``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import gc
import inspect
import math
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kvstress.audit._core import first_violation_since, violations_mark
from kvstress.controlled import SchedulerExhausted, SchedulerMisbehaved, run_controlled
from kvstress.controlled._baton import ThreadController
from kvstress.controlled._loop import REPORTED
from kvstress.controlled._patch import cooperative, loop_clock, resolve_modules, source_files
from kvstress.controlled._reach import reached_modules, users_own
from kvstress.schedulers import DFSScheduler, ReplayScheduler, Schedule, ScheduleDivergence, Scheduler

# The library's threaded modules (the pools, and the block tables, manager and prefix cache a
# serving loop builds on them) are always cooperative on the baton: their locks must be the
# baton's, or a thread waiting on a real lock that a parked thread holds would stall the run
# (two threads on a BlockManager with its prefix cache: StuckThread at the cache's lock, a
# blind user's correct engine).
LIBRARY_MODULES = (
    "kvstress.pool._threaded",
    "kvstress.pool._tiered",
    "kvstress.pool._base",
    "kvstress.paged._table",
    "kvstress.paged._cache",
    "kvstress.paged._manager",
)


@dataclass(frozen=True)
class Outcome:
    """What a search saw: ``runs`` executed; ``failure`` and its ``schedule`` when one raised."""

    runs: int
    exhausted: bool
    failure: BaseException | None = None
    schedule: Schedule | None = None


def underlying(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function itself, under ``functools.partial`` layers and ``functools.wraps`` wrappers."""
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif hasattr(fn, "__wrapped__"):
            fn = inspect.unwrap(fn)
        else:
            return fn


def is_async(fn: Callable[..., Any]) -> bool:
    """True for a coroutine function (run on the controlled loop), False for a plain one."""
    return inspect.iscoroutinefunction(underlying(fn))


def thread_modules(fn: Callable[..., Any], modules: Iterable[object]) -> tuple[types.ModuleType, ...]:
    """The modules a threaded ``fn`` is traced in: its own, the given ones, the pools', and the
    user's own modules (outside the installed packages) that its module reaches: the code under
    test is seldom in the test's file, and a lost update between two threads in the user's
    ``readers.py`` passed 200 schedules, found at the second once named in ``modules`` (a blind
    user's). Whatever they import: a counter class whose module imports nothing of threading
    runs in the threads all the same, and its ``n = self.n; self.n = n + 1`` passed 300
    schedules untraced. An installed package's modules are made cooperative, not traced
    (``used_modules``)."""
    resolved = resolve_modules((underlying(fn), *modules, *LIBRARY_MODULES))
    own = used_modules(fn, resolved, own_code=True)
    return resolved + tuple(module for module in own if users_own(module))


THREAD_API = frozenset({"threading", "queue", "_thread", "concurrent", "time"})
ASYNC_API = frozenset({"asyncio", "time"})


def used_modules(
    fn: Callable[..., Any],
    known: Iterable[types.ModuleType],
    api: frozenset[str] = THREAD_API,
    *,
    own_code: bool = False,
) -> tuple[types.ModuleType, ...]:
    """The modules a test's module reaches (``reached_modules``: what it imports, and through
    the user's own code what that imports) that use ``api`` themselves: a pool or a serving loop
    the test imports from the user's own package, and the free list or the clock helper that
    pool imports in turn. ``known`` ones are left out.

    For a threaded test they are made cooperative (not traced), so the locks and conditions
    their code makes while the test runs are the baton's: a thread waiting on a real one would
    hold the baton and wait out its timeout alone, and a correct pool would answer None. For an
    async test (``ASYNC_API``) their clocks read the loop and the asyncio primitives they made
    at import get fresh copies for each schedule's loop, as the test's own module's do. With
    ``own_code``, every reached module of the user's own too, whatever it imports."""
    module = inspect.getmodule(underlying(fn))
    if module is None:
        return ()
    seen = {known_module.__name__ for known_module in known}
    reached = reached_modules([module], api, own_code=own_code)
    return tuple(found for found in reached if found.__name__ not in seen)


def loop_modules(fn: Callable[..., Any], modules: Iterable[object]) -> tuple[types.ModuleType, ...]:
    """The modules whose clock reads are the controlled loop's while an async ``fn`` runs on it
    (``loop_clock``), as they are on a real loop (``loop.time()`` is ``time.monotonic()``): a
    deadline on ``time.monotonic`` then comes with the virtual sleeps. ``fn``'s own, ``modules``,
    and those ``fn``'s module refers to that use asyncio (their module-level primitives are
    fresh for each loop)."""
    clocked = resolve_modules((underlying(fn), *modules))
    return clocked + used_modules(fn, clocked, ASYNC_API)


def executor_modules() -> tuple[types.ModuleType, ...]:
    """The standard library's thread pool, made cooperative (not traced) for a threaded test:
    a test that runs its workers on a ``ThreadPoolExecutor`` has them controlled, and its futures
    wait on the baton, where real workers would run outside it."""
    return resolve_modules((concurrent.futures.ThreadPoolExecutor, concurrent.futures.Future))


BACKENDS = ("asyncio", "trio")

MAX_TIME_S = 3600.0
"""Virtual seconds one explored schedule may last (``TimeLimitExceeded`` past them). A schedule
in which a task waits for ever while a watchdog's timer keeps firing never ends on its own:
virtual time moves, so the step bound of one instant never trips. An hour is far past the
timeouts of a test, and on virtual time it costs only the timers that fire in it."""


def check_backend(backend: object, name: str = "backend") -> str:
    """``backend`` if it is one an async test can be explored on; ValueError naming ``name``."""
    if backend not in BACKENDS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    return str(backend)


def search(
    fn: Callable[[], Any],
    scheduler: Scheduler,
    limit: int,
    *,
    failure_types: tuple[type[BaseException], ...] = (Exception,),
    modules: Iterable[object] = (),
    backend: str = "asyncio",
    retry: bool = True,
    trio_clock: Any = None,
    trio_instruments: Sequence[Any] = (),
) -> Outcome:
    """Run ``fn`` under at most ``limit`` executions of ``scheduler``, stopping at the first failure.

    An async ``fn`` runs on ``backend``: the controlled asyncio loop, or trio seeded per
    execution by one value of the scheduler (``seeded_trio_run``: trio's batch orders and
    virtual time; trio offers no per-step choice, so every strategy there is a seeded random
    search); in its module and ``modules``, ``time.monotonic`` and ``time.perf_counter`` read
    the loop's virtual clock. A plain ``fn`` runs on the baton, ``modules`` traced and
    cooperative. ``ScheduleDivergence`` (``fn`` is not deterministic under control, or a replayed
    schedule belongs to other code) and ``SchedulerMisbehaved`` are not findings about ``fn``:
    they propagate, as does anything outside ``failure_types`` (KeyboardInterrupt, a skip);
    with ``retry``, a replay whose try diverged is tried again first (``ReplayScheduler.again``).
    ``trio_clock`` and ``trio_instruments`` are the test's own for a trio run (pytest-trio's
    clock fixtures): the run's clock is then the test's, not kvstress's virtual one.
    """
    if is_async(fn):
        if check_backend(backend) == "trio":
            run: Callable[[], object] = lambda: _trio_once(fn, scheduler, trio_clock, trio_instruments)  # noqa: E731
        else:
            run = lambda: run_controlled(fn, scheduler, max_time=MAX_TIME_S, note_still=True)  # noqa: E731
        clocked = loop_modules(fn, modules)

        def once() -> object:
            # Fresh asyncio primitives for each schedule: each runs on a loop of its own.
            with loop_clock(clocked, fresh_primitives=True):
                return run()

        return _loop(once, scheduler, limit, failure_types, retry)
    resolved = thread_modules(fn, modules)
    files = source_files(resolved)
    plain = functools.partial(_not_awaitable, fn)
    with cooperative((*resolved, *used_modules(fn, resolved), *executor_modules())):
        once = lambda: ThreadController(scheduler, trace_files=files, max_time=MAX_TIME_S).run(plain)  # noqa: E731
        return _loop(once, scheduler, limit, failure_types, retry)


def _trio_once(
    fn: Callable[[], Any], scheduler: Scheduler, clock: Any = None, instruments: Sequence[Any] = ()
) -> None:
    """One execution on trio: the scheduler's one value seeds it; cancelled, and failed with
    ``TimeLimitExceeded``, at ``MAX_TIME_S`` of virtual time, as the asyncio loop is."""
    import trio

    from kvstress.controlled import TimeLimitExceeded, seeded_trio_run
    from kvstress.controlled._trio import named_like

    if not scheduler.new_execution():
        raise SchedulerExhausted(f"{type(scheduler).__name__} has no execution left to run")

    async def bounded() -> None:
        # Just past the hour, as the asyncio loop stops only at a timer beyond it: a schedule
        # that ends at the hour exactly is not cut.
        with trio.move_on_after(math.nextafter(MAX_TIME_S, math.inf)) as scope:
            await fn()
        if scope.cancelled_caught:
            raise TimeLimitExceeded(
                f"virtual time passed {MAX_TIME_S:g} s: something keeps waiting or polling long "
                "past every timeout it was given (or keeps its deadline on the real clock, in a "
                "module kvstress does not control: one imported inside a function; pass it in "
                "modules)"
            )

    named_like(bounded, fn)
    seed = scheduler.next_u64()
    if not trio.lowlevel.in_trio_run():
        seeded_trio_run(bounded, seed=seed, clock=clock, instruments=instruments)
        return
    # Called inside a trio run of this thread (anyio's pytest plugin keeps one open on trio for
    # the test's async fixtures), where trio refuses a second: the schedule runs in a thread of
    # its own, and this one waits (it was "Attempted to call run() from inside a run()", a
    # blind user's async fixture on trio, reported as the schedule failing).
    outcome: list[BaseException | None] = []

    def in_thread() -> None:
        try:
            seeded_trio_run(bounded, seed=seed, clock=clock, instruments=instruments)
        except BaseException as error:  # handed to the caller's thread
            outcome.append(error)
        else:
            outcome.append(None)

    runner = threading.Thread(target=in_thread, name="kvstress-trio-schedule", daemon=True)
    runner.start()
    runner.join()
    if outcome and outcome[0] is not None:
        raise outcome[0]


class MisusedExplore(ValueError):
    """How ``explore`` was called is wrong (found only once ``fn`` ran): raised as it is, with no
    schedule to replay."""


def _not_awaitable(fn: Callable[[], Any]) -> Any:
    """``fn()``, refusing a plain function that returned a coroutine (``lambda: main()``)."""
    result = fn()
    if inspect.iscoroutine(result):
        result.close()  # never awaited: close it so Python does not warn about it
        raise MisusedExplore(
            "fn returned a coroutine: pass the async function itself (or functools.partial of it), "
            "not a plain function that calls it, so that it runs on the controlled event loop"
        )
    return result


def _loop(
    once: Callable[[], object],
    scheduler: Scheduler,
    limit: int,
    failure_types: tuple[type[BaseException], ...],
    retry: bool = True,
) -> Outcome:
    done = 0
    while done < limit:
        mark = violations_mark()
        try:
            once()
        except SchedulerExhausted:
            return Outcome(done, exhausted=True)
        except ScheduleDivergence as divergence:
            if retry and diverged_again(scheduler, divergence):
                continue
            raise
        except SchedulerMisbehaved:
            raise
        except failure_types as failure:
            cause = root_cause(failure, mark)
            note_tries(scheduler, cause)
            return Outcome(done + 1, exhausted=False, failure=cause, schedule=scheduler.schedule())
        done += 1
    return Outcome(limit, exhausted=False)


def diverged_again(scheduler: object, divergence: ScheduleDivergence) -> bool:
    """After a replay's try left its schedule: True where the replay may try again; otherwise
    the divergence says how many tries it had. A dfs execution that left its path is run again
    too (``DFSScheduler.again``)."""
    if isinstance(scheduler, DFSScheduler):
        if scheduler.again():
            return True
        divergence.add_note(
            f"kvstress: the same path left its schedule {scheduler.diverged} times in a row; random "
            "and pct explore such a program (strategy= in the marker or the call)"
        )
        return False
    if not isinstance(scheduler, ReplayScheduler):
        return False
    if scheduler.again():
        return True
    tries = scheduler.diverged
    if tries > 1:
        divergence.add_note(
            f"kvstress: all {tries} tries of the replay left the schedule: the work in real threads "
            "comes back at other points each time; the search's own seed (seed= in the marker or "
            "the call) runs the search again"
        )
    return False


def note_tries(scheduler: object, failure: BaseException) -> None:
    """A replay that failed after tries that left its schedule says which try it was."""
    if isinstance(scheduler, ReplayScheduler) and scheduler.diverged:
        failure.add_note(
            f"kvstress: the replay followed its schedule on try {scheduler.tried} (the {scheduler.diverged} "
            "before it left the schedule: work in real threads runs outside it)"
        )


def root_cause(failure: BaseException, mark: int) -> BaseException:
    """The audit violation found in this run since ``mark``, if the run failed with something
    else (a deadlock once the task that hit the violation died, a TaskGroup's error that
    wraps a worker's): the faulty call comes first, and the failure it led to is noted on it."""
    found = first_violation_since(mark)
    if found is not None:
        # The task it killed logged "Task exception was never retrieved" under the report.
        setattr(found, REPORTED, True)
    if found is None or found is failure or _holds(failure, found):
        return failure
    summary = str(failure).strip().splitlines()[0] if str(failure).strip() else ""
    found.add_note(f"kvstress: the run went on and then failed with {type(failure).__name__}: {summary}")
    # The task that died with the violation ends up in a reference cycle. Left to the next
    # young-generation collection, it was collected inside pytest's ast.parse of this very
    # failure: its "never retrieved" log formats a traceback, which on 3.11 parses again inside
    # that parse, and CPython 3.11.7's parser then fails every parse for good (the test ended in
    # an INTERNALERROR, not its report). A full collection now logs what is garbage already and
    # moves the rest to the oldest generation, collected seldom (at exit, as a rule).
    gc.collect()
    return found


def _holds(failure: BaseException, found: BaseException) -> bool:
    """Whether ``failure`` is an exception group that holds ``found``."""
    if isinstance(failure, BaseExceptionGroup):
        return any(inner is found or _holds(inner, found) for inner in failure.exceptions)
    return False
