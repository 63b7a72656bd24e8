"""Uniform random scheduling: at every decision, each runnable task is equally likely."""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.schedulers._base import SchedulerBase


class RandomScheduler(SchedulerBase):
    """Picks uniformly among the runnable tasks; never runs out of executions.

    The simplest strategy and a good default: cheap, unbiased, and with enough executions it
    reaches any interleaving. Bugs that need a long preemption-free stretch followed by one
    switch at a precise step are found faster by ``PCTScheduler``.

    On the thread baton a sleeping thread is a choice too (``fires_timers``): a poller may wake
    while the others are still runnable, as it does on an OS that preempts them.
    """

    name = "random"
    fires_timers = True

    def _begin(self) -> bool:
        return True

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        return runnable[self._rng.randrange(len(runnable))]
