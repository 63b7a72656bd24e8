"""Uniform random scheduling: at every decision, each runnable task is equally likely."""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.schedulers._base import SchedulerBase
from kvstress.schedulers._schedule import ALL_TIMERS


class RandomScheduler(SchedulerBase):
    """Picks uniformly among the runnable tasks; never runs out of executions.

    The simplest strategy and a good default: cheap, unbiased, and with enough executions it
    reaches any interleaving. Bugs that need a long preemption-free stretch followed by one
    switch at a precise step are found faster by ``PCTScheduler``.

    A timer due soon is a choice too (``fires_timers``, ``ALL_TIMERS``): on the thread baton a
    poller may wake while the others are still runnable, as it does on an OS that preempts them,
    and on the controlled loop a timer may fire before a ready task's next step, as it does
    behind a step that runs long.
    """

    name = "random"
    fires_timers = ALL_TIMERS

    def _begin(self) -> bool:
        return True

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        return runnable[self._rng.randrange(len(runnable))]
