"""Run a threaded program under a scheduler: one execution, or a search until it fails."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kvstress.controlled._baton import DEFAULT_STALL_TIMEOUT, DEFAULT_THREAD_STEPS, ThreadController
from kvstress.controlled._errors import SchedulerExhausted, SchedulerMisbehaved
from kvstress.controlled._explore import Exploration
from kvstress.controlled._patch import cooperative, resolve_modules, source_files
from kvstress.schedulers import ScheduleDivergence, Scheduler

T = TypeVar("T")


def run_threads(
    main: Callable[[], T],
    scheduler: Scheduler,
    *,
    modules: Iterable[object] = (),
    max_steps: int = DEFAULT_THREAD_STEPS,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    max_time: float | None = None,
) -> T:
    """Run ``main()`` as one controlled execution of ``scheduler``; return what it returns.

    ``main`` runs as controlled thread 0 and starts others with ``threading.Thread`` from a
    patched module or with ``spawn``. ``modules`` (modules, their names, or classes and
    functions, whose defining modules count; a class brings its whole MRO) are the code under
    test: each of their lines is a scheduling point, and for the run they see cooperative
    ``threading``, ``time`` and ``queue``. Build the pool inside ``main`` so that its locks are
    cooperative ones.

    Raises what the first failing thread raised, ``ThreadDeadlock`` (every thread blocked, with
    the wait-for graph), ``StepLimitExceeded`` (more than ``max_steps`` scheduling points at one
    instant of virtual time), ``TimeLimitExceeded`` (virtual time past ``max_time`` seconds),
    ``StuckThread`` (a thread ran ``stall_timeout`` wall seconds without a scheduling point) or
    ``SchedulerExhausted`` (the scheduler has no execution left; ``main`` never runs).
    """
    resolved = resolve_modules(modules)
    controller = ThreadController(
        scheduler,
        trace_files=source_files(resolved),
        max_steps=max_steps,
        stall_timeout=stall_timeout,
        max_time=max_time,
    )
    with cooperative(resolved):
        return controller.run(main)  # type: ignore[no-any-return]


def explore_threads(
    main: Callable[[], Any],
    scheduler: Scheduler,
    *,
    max_executions: int,
    modules: Iterable[object] = (),
    max_steps: int = DEFAULT_THREAD_STEPS,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> Exploration:
    """``run_threads`` execution after execution, like ``explore`` for the controlled loop.

    Stops at the first execution that raises an ``Exception`` or when the scheduler is
    exhausted (for DFS: every interleaving within its bound ran clean). ``ScheduleDivergence``
    and ``SchedulerMisbehaved`` say nothing about the program under test and propagate.
    """
    if type(max_executions) is not int or max_executions < 1:
        raise ValueError(
            f"max_executions must be an int >= 1, got {max_executions!r} ({type(max_executions).__name__})"
        )
    resolved = resolve_modules(modules)
    files = source_files(resolved)
    with cooperative(resolved):
        for done in range(max_executions):
            controller = ThreadController(
                scheduler, trace_files=files, max_steps=max_steps, stall_timeout=stall_timeout
            )
            try:
                controller.run(main)
            except SchedulerExhausted:
                return Exploration(executions=done, exhausted=True)
            except (ScheduleDivergence, SchedulerMisbehaved):
                raise
            except Exception as failure:
                return Exploration(done + 1, exhausted=False, failure=failure, schedule=scheduler.schedule())
    return Exploration(executions=max_executions, exhausted=False)


def spawn(target: Callable[[], Any], name: str | None = None) -> Any:
    """Start a controlled thread running ``target()`` from inside ``run_threads``; returns a
    handle whose ``join()`` waits cooperatively."""
    from kvstress.controlled._coop import Thread

    thread = Thread(target=target, name=name)
    thread.start()
    return thread
