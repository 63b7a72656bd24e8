"""What the controlled event loop raises instead of hanging or guessing."""

from __future__ import annotations


class ControlledLoopError(RuntimeError):
    """Base class: the controlled loop cannot go on with this run."""


class Deadlock(ControlledLoopError):
    """Nothing can ever run again: no callback is ready, no timer is pending, no I/O is possible.

    Every task waits for an event nobody will set (a lost wake-up, a forgotten release), or for
    real I/O or a thread, which the controlled loop does not wait for.
    """


class StepLimitExceeded(ControlledLoopError):
    """One ``run_until_complete``/``run_forever`` ran ``max_steps`` callbacks without finishing.

    A livelock (tasks keep waking each other; under PCT, a task busy-waiting with
    ``sleep(0)``), or a program longer than the bound.
    """


class SchedulerExhausted(ControlledLoopError):
    """A loop was created for a scheduler whose ``new_execution()`` returned False.

    Not a failure: the strategy has nothing left to explore (DFS finished, a replay already ran).
    """


class SchedulerMisbehaved(ControlledLoopError):
    """The scheduler chose a task that was not among the runnable ones it was offered."""
