"""One marked test, one fresh set of fixtures per schedule: pytest's test protocol, repeated.

pytest sets a test's fixtures up once per run of its protocol (setup, call, teardown). An
explored test is many runs, one per schedule, and its fixtures must be fresh for each, as they
would be for as many separate tests: a pool built by a fixture keeps what the last schedule did
to it (a counter, an ``asyncio.Condition`` bound to the last schedule's event loop), and a
correct test would then fail on the second schedule.

So the plugin runs the protocol itself for a marked test. Each schedule runs on a fresh copy of
the item (``Function.from_parent``, the public constructor), through pytest's own hooks:
``pytest_runtest_setup``, ``pytest_runtest_call`` (which runs one schedule, see
``_explore``), ``pytest_runtest_teardown``, each wrapped in ``CallInfo`` and turned into a report
by ``pytest_runtest_makereport``. Only the last copy's reports are logged, so the test reports
once: its failing schedule, or its last passing one. Between schedules a copy is torn down to
the test's parent only (``nextitem`` is the test itself), so wider fixtures live on.

A plain test that starts threads has its modules made cooperative for its fixtures too, so a
pool a fixture builds takes the baton's locks.
"""

from __future__ import annotations

import bdb
import contextlib
import functools
import inspect
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from kvstress.schedulers import Scheduler

SECTION = "kvstress explore"
RUN = pytest.StashKey["Run"]()
"""On each copy of a marked test: the exploration it takes a schedule of."""


@dataclass
class Run:
    """A marked test's exploration, shared by its copies: each copy's call runs one schedule.

    ``done`` is set by the call that ends it: a failure, the last of ``limit`` schedules, a
    scheduler with nothing left, or a test that is not explored (it ran as it is).
    """

    scheduler: Scheduler | None  # None: the marker is wrong (``problem``) and nothing is explored
    limit: int
    name: str  # the strategy, or "replay"
    seed: int
    modules: tuple[object, ...] = ()
    problem: str = ""
    runs: int = 0  # schedules run so far
    done: bool = False
    teardown_note: Callable[[], str] | None = None  # how to replay the schedule run, should its teardown fail
    on_loop: bool = False  # an asyncio test whose copies' loop pytest-asyncio takes from us
    loop: Any = None  # the controlled loop the copy being run was set up on (``on_loop``)
    exhausted: bool = False  # the strategy had no schedule left for the copy being set up
    audit_mark: int = 0  # ``violations_mark`` as the copy being run was set up (``on_loop``)
    # Threads the copy's function-scoped fixtures started (None: another plugin ran the setup):
    # the call refuses to explore beside one still running (``_explore._refuse_fixture_threads``).
    setup_threads: set[threading.Thread] | None = None
    backend: str = "asyncio"  # the backend ``scheduler`` was made for

    def on_backend(self, backend: str) -> None:
        """Make the scheduler for ``backend`` if it was made for another before a schedule ran.

        The protocol makes the run before the fixtures are set up, and a test's backend may be
        known only from them (an ``anyio_backend`` fixture returning "trio"): ``dfs`` made for
        asyncio ran one schedule on trio and called that all of them (a blind user's).
        """
        if backend == self.backend or self.scheduler is None or self.name == "replay" or self.runs:
            return
        from kvstress.explorer._strategies import make_scheduler

        self.scheduler, self.backend = make_scheduler(self.name, self.seed, backend), backend


def run_schedules(item: pytest.Function, nextitem: pytest.Item | None, run: Run) -> None:
    """pytest's protocol for ``item``, once per schedule of ``run`` on a fresh copy of it."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    direct = _direct_params(item)
    spent: dict[str, float] = {}
    with _patched(item, run):
        while True:
            copy = _copy(item, direct)
            copy.stash[RUN] = run
            run.loop = None
            with _on_loop(item, run):
                reports, calls, unbound = _once(copy, item, nextitem, run, direct)
            for report in reports:
                spent[report.when] = spent.get(report.when, 0.0) + report.duration
            if unbound is not None and not run.done:
                direct.append(unbound)  # a direct parameter after all: bind it and set up again
            elif _final(reports, run, item):
                break
    for report in reports:
        # Each phase's time over every schedule: ``--durations`` and JUnit's time showed the
        # last schedule's, 0.01 s for a test that explored for two minutes (a blind user's).
        report.duration = spent[report.when]
        ihook.pytest_runtest_logreport(report=report)
    for report, call in zip(reports, calls, strict=False):  # a signal may cut a record short
        if _interactive(call, report):
            ihook.pytest_exception_interact(node=copy, call=call, report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _once(
    copy: pytest.Function, item: pytest.Function, nextitem: pytest.Item | None, run: Run, direct: list[str]
) -> tuple[list[pytest.TestReport], list[pytest.CallInfo[None]], str | None]:
    """Setup, call and teardown of one copy, torn down to the parent unless it is the last;
    and the name of a parameter its setup looked up as a fixture, if that is why it failed."""
    ihook = copy.ihook
    reports: list[pytest.TestReport] = []
    calls: list[pytest.CallInfo[None]] = []

    def phase(when: Literal["setup", "call", "teardown"], hook: Callable[[], None]) -> None:
        call = pytest.CallInfo.from_call(hook, when=when, reraise=_reraise(copy))
        calls.append(call)
        reports.append(ihook.pytest_runtest_makereport(item=copy, call=call))

    run.setup_threads = set()  # filled while its fixtures are set up (``pytest_fixture_setup``)
    unbound = None
    try:
        phase("setup", lambda: ihook.pytest_runtest_setup(item=copy))
        unbound = _unbound_param(item, calls[0], direct)
        if reports[0].passed and not copy.config.getoption("setuponly", False):
            phase("call", lambda: ihook.pytest_runtest_call(item=copy))
    except pytest.fail.Exception as stopped:
        # A signal's failure (pytest-timeout's alarm) that landed between two phases: the test
        # fails with it, as within one, instead of pytest's INTERNALERROR ending the session.
        del reports[1:], calls[1:]
        if len(reports) < len(calls):  # it landed between the setup's call and its report
            reports.append(ihook.pytest_runtest_makereport(item=copy, call=calls[0]))
        run.done = True
        phase("call", functools.partial(_raise, stopped))
    last = unbound is None and _final(reports, run, item)
    after = nextitem if last else item
    phase("teardown", lambda: ihook.pytest_runtest_teardown(item=copy, nextitem=after))
    if len(reports) == 3 and reports[1].passed and reports[2].failed and run.teardown_note:
        from kvstress.explorer._explore import stopped_by_timeout

        cut = calls[2].excinfo is not None and stopped_by_timeout(calls[2].excinfo.value)
        if not cut:  # pytest-timeout's alarm in the teardown: no replay would fail there
            reports[2].sections.append((SECTION, run.teardown_note()))
        else:  # the call passed: without a word, a cut exploration read as a whole one
            reports[2].sections.append(
                (
                    SECTION,
                    f"kvstress: pytest-timeout's limit stopped the exploration in the teardown of "
                    f"schedule {run.runs}; the schedules before it passed, the rest did not run. A "
                    "longer timeout for this test, or fewer schedules, lets it finish",
                )
            )
    if not last and not reports[-1].passed:
        _tear_down_to(nextitem, item, direct)  # the run ends here, with the parent still set up
        run.done = True
    return reports, calls, unbound


def _raise(error: BaseException) -> None:
    raise error


def _final(reports: list[pytest.TestReport], run: Run, item: pytest.Function) -> bool:
    session = item.session
    stopping = bool(session.shouldfail or session.shouldstop)
    return run.done or stopping or any(not report.passed for report in reports)


def _tear_down_to(nextitem: pytest.Item | None, item: pytest.Function, direct: list[str]) -> None:
    """Finish a teardown that stopped at ``item``'s parent: one more copy is set up (its call
    skipped) and torn down to ``nextitem``, through the same hooks, and its reports dropped;
    pytest has no public call that tears down without a test."""
    spare = _copy(item, direct)
    ihook = spare.ihook
    reraise = _reraise(spare)
    pytest.CallInfo.from_call(lambda: ihook.pytest_runtest_setup(item=spare), "setup", reraise)
    pytest.CallInfo.from_call(
        lambda: ihook.pytest_runtest_teardown(item=spare, nextitem=nextitem), "teardown", reraise
    )


def _copy(item: pytest.Function, direct: Iterable[str]) -> pytest.Function:
    """A fresh item for the same test: its own fixture request, instance and markers.

    pytest resolves the copy's fixtures again. The values of a direct parametrisation
    (``@pytest.mark.parametrize`` without ``indirect``) are no fixtures there, so the names in
    ``direct`` are bound to the copy's function instead, and pytest leaves them out of what it
    sets up. Names a plugin added to the test's fixtures (anyio's ``anyio_backend``) are added
    to the copy's.
    """
    callspec = getattr(item, "callspec", None)
    options: dict[str, Any] = {}
    values = {name: callspec.params[name] for name in direct} if callspec is not None else {}
    if values:
        function = item.obj
        if inspect.ismethod(function) and isinstance(item.parent, pytest.Class):
            instance = item.parent.newinstance()  # type: ignore[no-untyped-call]  # fresh, as pytest gives
            options["callobj"] = types.MethodType(_bound(function.__func__, values), instance)
        else:
            options["callobj"] = _bound(function, values)
    copy = type(item).from_parent(
        item.parent,
        name=item.name,
        callspec=callspec,
        keywords=item.keywords,
        originalname=item.originalname,
        **options,
    )
    for mark in item.own_markers:  # markers a hook added to the item (pytest_collection_modifyitems)
        if mark not in copy.own_markers:
            copy.own_markers.append(mark)
    for name in item.fixturenames:
        if name not in copy.fixturenames and name not in values:
            copy.fixturenames.append(name)
    return copy


def _direct_params(item: pytest.Function) -> list[str]:
    """The names ``item``'s ``parametrize`` markers pass straight to the test function (a
    ``pytest_generate_tests`` hook's are found when the copy's setup misses them)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return []
    direct: list[str] = []
    for mark in item.iter_markers(name="parametrize"):
        if not mark.args:
            continue
        names = mark.args[0]
        names = [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) else list(names)
        indirect = mark.kwargs.get("indirect", False)
        for name in names:
            through_fixture = indirect is True or (isinstance(indirect, list | tuple) and name in indirect)
            if not through_fixture and name in callspec.params and name not in direct:
                direct.append(name)
    return direct


def _unbound_param(item: pytest.Function, setup: pytest.CallInfo[None], direct: list[str]) -> str | None:
    """The parameter a copy's setup failed to find as a fixture: a direct one to bind."""
    callspec = getattr(item, "callspec", None)
    error = setup.excinfo.value if setup.excinfo is not None else None
    if callspec is None or not isinstance(error, pytest.FixtureLookupError):
        return None
    name = error.argname
    return name if name in callspec.params and name not in direct else None


class _Bound(functools.partial):  # type: ignore[type-arg]
    """A test function with its direct parameters bound by keyword, whose ``__code__`` is the
    function's. pytest finds a failing test's code through it (``getrawcode``, after unwrapping
    partials with ``get_real_func``): a test class's method is bound to its instance around the
    partial, which that unwrapping does not see through, and every failure of a parametrised
    method was an INTERNALERROR ("could not get code object"; a blind user's suite)."""

    @property
    def __code__(self) -> types.CodeType:
        return self.func.__code__


def _bound(function: Callable[..., Any], values: dict[str, object]) -> Callable[..., Any]:
    """``function`` with ``values`` bound by keyword, keeping its markers and its async-ness."""
    bound = _Bound(function, **values)
    bound.__dict__.update(getattr(function, "__dict__", {}))  # pytestmark and other attributes
    # pytest-trio names its test task after the function: every parametrised pytest-trio test
    # failed "schedule 1" (a blind user's). Its name only: with its __module__ and __qualname__
    # too, a parametrised thread test of a class was no longer traced as its module's code.
    bound.__name__ = getattr(function, "__name__", "test")  # type: ignore[attr-defined]
    return bound


def _reraise(item: pytest.Item) -> tuple[type[BaseException], ...]:
    """What escapes a phase rather than failing it, as pytest's own protocol decides."""
    if item.config.getoption("usepdb", False):
        return (pytest.exit.Exception,)
    return (pytest.exit.Exception, KeyboardInterrupt)


def _interactive(call: pytest.CallInfo[None], report: pytest.TestReport) -> bool:
    """Whether ``--pdb`` and friends should see this phase's exception."""
    if call.excinfo is None or hasattr(report, "wasxfail"):
        return False
    return not isinstance(call.excinfo.value, pytest.skip.Exception | bdb.BdbQuit)


def _on_loop(item: pytest.Function, run: Run) -> contextlib.AbstractContextManager[None]:
    """For an asyncio test whose fixtures and call share one controlled loop per schedule
    (``run.on_loop``): its modules' clocks read that loop, and their module-level asyncio
    primitives are fresh, from its setup to its teardown."""
    if not run.on_loop or run.scheduler is None:
        return contextlib.nullcontext()
    from kvstress.controlled._patch import loop_clock
    from kvstress.explorer._run import loop_modules

    try:
        modules = loop_modules(item.obj, run.modules)
    except ValueError:
        return contextlib.nullcontext()  # the call reports the bad ``modules`` argument
    return loop_clock(modules, fresh_primitives=True)


@contextlib.contextmanager
def _patched(item: pytest.Function, run: Run) -> Iterator[None]:
    """For a plain test: its modules cooperative for whole schedules, fixtures included."""
    from kvstress.controlled._patch import cooperative
    from kvstress.explorer._run import executor_modules, is_async, thread_modules, used_modules

    if is_async(item.obj) or run.scheduler is None:
        yield
        return
    try:
        modules = thread_modules(item.obj, run.modules)
    except ValueError:
        yield  # the call reports the bad ``modules`` argument
        return
    with cooperative((*modules, *used_modules(item.obj, modules), *executor_modules())):
        yield
