"""What controlled execution (the event loop, the thread baton) raises instead of hanging or guessing."""

from __future__ import annotations


class ControlledLoopError(RuntimeError):
    """Base class: the controlled loop cannot go on with this run."""


class Deadlock(ControlledLoopError):
    """Nothing can ever run again: no callback is ready, no timer is pending, no I/O is possible.

    Every task waits for an event nobody will set (a lost wake-up, a forgotten release), or for
    real I/O or a thread, which the controlled loop does not wait for.
    """


class StepLimitExceeded(ControlledLoopError):
    """An execution ran ``max_steps`` callbacks (the loop) or scheduling points (threads) at one
    instant of virtual time.

    A spin (virtual time never moves while a task or thread stays runnable, so a wait that polls
    without parking never reaches its deadline), a livelock (tasks keep waking each other), or a
    program longer than the bound. A wait that sleeps between polls lets time move and is not
    counted against it. ``culprit`` names the task or thread that ran last.
    """

    def __init__(self, message: str, culprit: str | None = None) -> None:
        super().__init__(message)
        self.culprit = culprit


class TimeLimitExceeded(ControlledLoopError):
    """Virtual time passed the run's ``max_time``: something kept waiting, or polling with sleeps,
    long past every timeout it was given (a timeout ignored, a zero read as "forever")."""


class SchedulerExhausted(ControlledLoopError):
    """A loop was created for a scheduler whose ``new_execution()`` returned False.

    Not a failure: the strategy has nothing left to explore (DFS finished, a replay already ran).
    """


class SchedulerMisbehaved(ControlledLoopError):
    """The scheduler chose a task that was not among the runnable ones it was offered."""


class ThreadDeadlock(Deadlock):
    """Every live controlled thread is blocked and none has a deadline: nothing can ever run.

    ``wait_for`` maps each blocked thread to what it waits for and the thread that must act
    (None when no single thread is known, as for an Event or a Condition); ``cycle`` is a cycle
    of threads waiting on each other, or () when the wait is for something nobody will do.
    """

    def __init__(
        self,
        now: float,
        wait_for: dict[str, tuple[str, str | None]],
        daemons_timed: bool = False,
        outside: tuple[str, ...] = (),
    ) -> None:
        self.now = now
        self.daemons_timed = daemons_timed
        self.outside = tuple(outside)
        self.wait_for = dict(wait_for)
        self.cycle = _cycle({name: holder for name, (_, holder) in wait_for.items()})
        lines = [f"  {name} waits for {what}" for name, (what, _) in sorted(self.wait_for.items())]
        cycle = f"; cycle: {' -> '.join(self.cycle)}" if self.cycle else ""
        # ``daemons_timed``: a daemon's periodic wait (a ticker, a housekeeper) keeps a deadline
        # beside the others, blocked for good: the run is over, as a process whose only threads
        # left are daemons is.
        none = "none but a daemon has a deadline" if daemons_timed else "none has a deadline"
        # ``outside``: threads the run does not control, started during it and still alive (a
        # library's own, as anyio's blocking portal starts): a wait for one is not a deadlock
        # the schedule made, and the message says so rather than leave a bare wait-for graph.
        note = (
            f"\nStarted during the run and not controlled by it, still running: {', '.join(self.outside)}. "
            "A wait for such a thread (a library's own: anyio's blocking portal runs its event "
            "loop in one) is beyond the schedule: drive that code from threads the test starts, "
            "or keep it out of the explored code."
            if self.outside
            else ""
        )
        super().__init__(
            f"deadlock at virtual time {round(now, 9):g} s: every live thread is blocked and {none}"
            f"{cycle}. Wait-for graph:\n" + "\n".join(lines) + note
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.now, self.wait_for, self.daemons_timed, self.outside))


class StuckThread(ControlledLoopError):
    """A controlled thread kept running without reaching a scheduling point for too long.

    It blocked in something the controller does not see (a real lock, I/O, a C call) or spins
    outside the traced modules. The run is reported and the thread abandoned (a daemon).
    """


def _cycle(holders: dict[str, str | None]) -> tuple[str, ...]:
    """A cycle in waiter -> holder edges, starting from its smallest name; () when none."""
    for start in sorted(holders):
        path: list[str] = [start]
        node = holders.get(start)
        while node is not None and node not in path:
            path.append(node)
            node = holders.get(node)
        if node is not None:
            loop = path[path.index(node) :]
            first = loop.index(min(loop))
            loop = loop[first:] + loop[:first]
            return (*loop, loop[0])
    return ()
