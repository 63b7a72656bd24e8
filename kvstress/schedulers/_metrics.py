"""A wrapper that counts what any scheduler decides, without changing a single decision."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvstress.schedulers._base import Scheduler
from kvstress.schedulers._schedule import Schedule


@dataclass(frozen=True)
class SchedulerMetrics:
    """Counts over all executions so far.

    ``decisions`` counts ``next_task`` calls, ``preemptions`` those that switched away from a
    task that could have continued, and ``longest_execution`` the most decisions in one execution.
    """

    executions: int
    decisions: int
    random_draws: int
    preemptions: int
    longest_execution: int


class MetricsScheduler:
    """Wraps a scheduler, passes every call through, and counts; ``metrics`` reads the counts."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self._executions = 0
        self._decisions = 0
        self._draws = 0
        self._preemptions = 0
        self._this_execution = 0
        self._longest = 0

    @property
    def metrics(self) -> SchedulerMetrics:
        """A snapshot of the counts."""
        return SchedulerMetrics(
            executions=self._executions,
            decisions=self._decisions,
            random_draws=self._draws,
            preemptions=self._preemptions,
            longest_execution=max(self._longest, self._this_execution),
        )

    def new_execution(self) -> bool:
        """Start the inner scheduler's next execution (counted when it starts one)."""
        started = self.inner.new_execution()
        if started:
            self._executions += 1
            self._longest = max(self._longest, self._this_execution)
            self._this_execution = 0
        return started

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        """The inner scheduler's pick, counted."""
        chosen = self.inner.next_task(runnable, current)
        self._decisions += 1
        self._this_execution += 1
        if chosen != current and current in runnable:
            self._preemptions += 1
        return chosen

    @property
    def fires_timers(self) -> int:
        """As the inner scheduler."""
        return int(getattr(self.inner, "fires_timers", 0))

    @property
    def late_timers(self) -> bool:
        """As the inner scheduler."""
        return bool(getattr(self.inner, "late_timers", False))

    def next_u64(self) -> int:
        """The inner scheduler's random value, counted."""
        self._draws += 1
        return self.inner.next_u64()

    def schedule(self) -> Schedule:
        """The inner scheduler's schedule."""
        return self.inner.schedule()
