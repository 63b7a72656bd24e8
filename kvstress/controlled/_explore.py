"""Run a program under a scheduler, execution after execution, until it fails or the search ends."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kvstress.controlled._errors import SchedulerExhausted, SchedulerMisbehaved
from kvstress.controlled._loop import DEFAULT_MAX_STEPS, run_controlled
from kvstress.schedulers import Schedule, ScheduleDivergence, Scheduler


@dataclass(frozen=True)
class Exploration:
    """What ``explore`` saw.

    ``executions`` ran; ``exhausted`` says the scheduler had nothing left (for DFS: every
    interleaving within its bound ran, so a clean result is a proof up to that bound).
    ``failure`` is the first exception a run raised and ``schedule`` that run's schedule, which
    ``ReplayScheduler`` (or ``explore(main, ReplayScheduler(schedule), max_executions=1)``)
    replays to the same failure.
    """

    executions: int
    exhausted: bool
    failure: Exception | None = None
    schedule: Schedule | None = None

    @property
    def failed(self) -> bool:
        """True when a run raised."""
        return self.failure is not None


def explore(
    main: Callable[[], Coroutine[Any, Any, object]],
    scheduler: Scheduler,
    *,
    max_executions: int,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Exploration:
    """Run ``main()`` on a fresh controlled loop per execution, at most ``max_executions`` times.

    Stops at the first run that raises an ``Exception`` (including ``Deadlock`` and
    ``StepLimitExceeded``) or when the scheduler is exhausted. ``ScheduleDivergence`` (the program
    is not deterministic) and ``SchedulerMisbehaved`` (a broken scheduler) are not findings about
    the program under test, so they propagate.
    """
    if type(max_executions) is not int or max_executions < 1:
        raise ValueError(
            f"max_executions must be an int >= 1, got {max_executions!r} ({type(max_executions).__name__})"
        )
    for done in range(max_executions):
        try:
            run_controlled(main, scheduler, max_steps=max_steps)
        except SchedulerExhausted:
            return Exploration(executions=done, exhausted=True)
        except (ScheduleDivergence, SchedulerMisbehaved):
            raise
        except Exception as failure:
            return Exploration(done + 1, exhausted=False, failure=failure, schedule=scheduler.schedule())
    return Exploration(executions=max_executions, exhausted=False)
