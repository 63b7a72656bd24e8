"""``kvstress.explore``: run a test function under many controlled schedules, outside pytest.

A failure is re-raised as itself (its type is the test's verdict, an ``InvariantViolation`` from
``kvstress.audit`` for one) with a note naming the schedule, the seed and how to replay it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kvstress._violation import InvariantViolation
from kvstress.explorer._run import MisusedExplore, Outcome, check_backend, is_async, search
from kvstress.explorer._strategies import (
    check_schedules,
    check_strategy,
    make_scheduler,
    pick_seed,
    replay_scheduler,
)


@dataclass(frozen=True)
class Explored:
    """What a passing ``explore`` ran: ``schedules`` distinct executions of ``strategy`` from
    ``seed``; ``exhausted`` when the strategy had no more (DFS: every interleaving within its
    preemption bound ran, so the pass is a proof up to that bound)."""

    schedules: int
    strategy: str
    seed: int
    exhausted: bool = False

    def __str__(self) -> str:
        return f"kvstress {passed_line(self.schedules, self.strategy, self.seed, self.exhausted)}"


REPLAY_PASSED = (
    "replayed the given schedule, and it passed: the failure recorded with it did not happen "
    "again (the code changed since, or work outside the schedule's control went another way: "
    "real threads, or trio's own scheduling, which a trio replay seeds but does not dictate)"
)
"""What a passing replay says: a replay that passed said only "explored 1 schedule (strategy
'replay', seed <a fresh draw>)", and nothing that the failure was not reproduced (a blind user's
trio replays)."""

REPLAY_CALL_PASSED = (
    "replayed the given schedule, and its call passed; its fixtures' teardown, where the failure "
    "recorded may come back, runs next"
)
"""What the plugin says of a replayed test's call until its teardown has run: the failure
recorded may have been its fixtures' teardown's, and "did not happen again" then read beside the
teardown's error that it had (a blind user's); "its call passed" alone, printed above that error,
read at a glance as not reproduced (another's)."""


def passed_line(runs: int, strategy: str, seed: int, exhausted: bool = False) -> str:
    """What a passing exploration says (``kvstress.explore``'s result, the plugin's summary)."""
    if strategy == "replay":
        return REPLAY_PASSED
    end = ", every one the strategy has" if exhausted else ""
    return f"explored {runs} schedule{'' if runs == 1 else 's'} (strategy {strategy!r}, seed {seed}{end})"


def explore(
    fn: Callable[[], Any],
    *,
    schedules: int = 200,
    strategy: str = "pct",
    seed: int | None = None,
    replay: str | None = None,
    modules: Iterable[object] = (),
    backend: str = "asyncio",
) -> Explored:
    """Run ``fn()`` under up to ``schedules`` distinct controlled schedules; stop at the first failure.

    An ``async def`` ``fn`` runs on kvstress' controlled event loop (virtual time: a 30 s timeout
    costs nothing), one fresh loop per schedule; ``time.monotonic``, ``time.perf_counter`` and
    ``time.time`` read the same virtual clock in ``fn``'s module and in ``modules``. A plain ``fn`` runs as
    controlled thread 0: the threads it starts (``threading.Thread`` in its module or in
    ``modules``, a Thread subclass there, a ``ThreadPoolExecutor``'s workers) run one at a
    time, switching at every line of those modules and at every lock, condition, sleep and
    queue, on virtual time. Build the pool inside ``fn`` so each schedule starts fresh.
    ``backend="trio"`` runs an async ``fn`` on trio instead, seeded per schedule (trio's batch
    orders, ``MockClock`` virtual time); trio offers no per-step choice, so there every strategy
    is a seeded random search.

    ``strategy`` is ``"pct"`` (default), ``"random"`` or ``"dfs"``; ``seed`` None draws one,
    shown in the failure. ``replay`` (a ``ks1:...`` string from a failure) runs exactly that one
    schedule instead. A failing run's exception is re-raised with a note holding its schedule,
    seed and replay call. Bad arguments raise ValueError naming the argument.
    """
    check_schedules(schedules)
    check_strategy(strategy)
    check_backend(backend)
    run_seed = pick_seed(seed)
    if not callable(fn):
        raise ValueError(f"fn must be a function to explore, got {fn!r} ({type(fn).__name__})")
    if backend != "asyncio" and not is_async(fn):
        raise ValueError(f"backend={backend!r} applies to an async fn; {fn!r} runs on threads")
    if is_async(fn):
        _refuse_inside_a_run()
    if replay is not None:
        outcome = search(fn, replay_scheduler(replay), 1, modules=modules, backend=backend)
        strategy, schedules = "replay", 1
    else:
        scheduler = make_scheduler(strategy, run_seed, backend)
        outcome = search(fn, scheduler, schedules, modules=modules, backend=backend)
    if outcome.failure is not None:
        call = _called(fn)
        on = "" if backend == "asyncio" else f", backend={backend!r}"
        raise_failure(outcome, strategy, run_seed, schedules, f"kvstress.explore({call}, replay={{!r}}{on})")
    return Explored(outcome.runs, strategy, run_seed, outcome.exhausted)


def _refuse_inside_a_run() -> None:
    """An async ``fn`` gets an event loop (or a trio run) of its own per schedule, which cannot
    start in a thread where one runs already (an ``IsolatedAsyncioTestCase``'s test method):
    asyncio's refusal surfaced as the first schedule's failure, with a replay line, seconds in."""
    library = None
    try:
        asyncio.get_running_loop()
        library = "asyncio"
    except RuntimeError:
        trio = sys.modules.get("trio")
        if trio is not None:
            with contextlib.suppress(RuntimeError):
                trio.lowlevel.current_trio_token()
                library = "trio"
    if library is None:
        return
    raise RuntimeError(
        f"kvstress.explore() of an async fn cannot run inside a running {library} event loop: each "
        "schedule runs the fn on a loop of its own. Call it from a thread: "
        "await asyncio.to_thread(kvstress.explore, fn, ...) (anyio: anyio.to_thread.run_sync)"
    )


def _called(fn: Callable[[], Any]) -> str:
    """How a replay line names ``fn``: its qualified name, or a partial's as ``partial(name, ...)``."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({getattr(fn.func, '__qualname__', 'fn')}, ...)"
    return str(getattr(fn, "__qualname__", "fn"))


LONG_SCHEDULE = 400
"""A schedule longer than this (characters) is shown cut on the ``schedule:`` line."""


class ReplayHint(Protocol):
    """A replay command with the schedule still to put in: a format string whose ``{}`` (or
    ``{!r}``) takes it, or an object whose ``format`` may put a long one in a file
    (the pytest plugin's ``ReplayLine``)."""

    def format(self, schedule: str, /) -> str: ...


def failure_note(
    outcome: Outcome, strategy: str, seed: int, limit: int, replay_hint: ReplayHint, what: str = "failed"
) -> str:
    """The lines added to a failure: which schedule failed, its seed, and how to replay it.

    ``replay_hint`` is a format string whose ``{}`` (or ``{!r}``) takes the schedule text;
    ``what`` says what happened to the schedule.
    """
    schedule = str(outcome.schedule)
    if strategy == "replay":
        head = f"kvstress: the replayed schedule {what}"
    else:
        head = (
            f"kvstress: schedule {outcome.runs} of at most {limit} {what} (strategy {strategy!r}, "
            f"seed {seed}; seed={seed} in the marker or the call repeats the search)"
        )
    line = replay_hint.format(schedule)
    shown = schedule
    if len(schedule) > LONG_SCHEDULE:  # a long run's schedule is kilobytes: printed whole once
        where = "the replay line" if schedule in line else "the file the replay line names"
        shown = f"{schedule[: LONG_SCHEDULE // 4]}... ({len(schedule):,} characters: whole in {where})"
    return f"{head}\n  schedule: {shown}\n  replay:   {line}"


def raise_failure(outcome: Outcome, strategy: str, seed: int, limit: int, replay_hint: ReplayHint) -> None:
    """Re-raise ``outcome.failure`` as itself, with ``failure_note`` added to it."""
    failure = outcome.failure
    if failure is None:
        raise RuntimeError("raise_failure called for an outcome that did not fail")
    if isinstance(failure, MisusedExplore):
        raise failure  # how explore was called, not a schedule of the code
    # A violation inside an exception group (a task group's: anyio's, asyncio.TaskGroup) is
    # detailed on itself, where the group's traceback shows it.
    for violation in violations_in(failure):
        if violation.history:
            # No report file for an explored test: its history and blocks go into the failure
            # itself (after the message, which the exception shows already: an acquire stack).
            details, message = violation.details(), str(violation)
            rest = details.removeprefix(message) if details.startswith(message) else details
            violation.add_note(rest.lstrip("\n"))
    if stopped_by_timeout(failure):
        # Not the schedule's failure: a wall-clock alarm cut it, and its replay diverges there.
        failure.add_note(
            f"kvstress: pytest-timeout's limit stopped the exploration in schedule {outcome.runs} "
            f"of at most {limit} (strategy {strategy!r}, seed {seed}); the schedules before it "
            "passed. A longer timeout for this test, or fewer schedules, lets it finish"
        )
        raise failure
    failure.add_note(failure_note(outcome, strategy, seed, limit, replay_hint))
    raise failure


def stopped_by_timeout(failure: BaseException) -> bool:
    """Whether ``failure`` is pytest-timeout's (its alarm fails the test where it lands)."""
    return type(failure).__name__ == "Failed" and "from pytest-timeout" in str(failure)


def violations_in(error: BaseException) -> list[InvariantViolation]:
    """``error`` if it is a violation, and each one an exception group holds, nested or not."""
    if isinstance(error, InvariantViolation):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [found for inner in error.exceptions for found in violations_in(inner)]
    return []
