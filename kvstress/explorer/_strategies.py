"""Strategy names for ``kvstress.explore`` and the marker: each name builds one scheduler."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

from kvstress.schedulers import (
    SLEEPERS,
    DFSScheduler,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Scheduler,
)


class SleepersOnlyRandom(RandomScheduler):
    """``random`` for an explored test: only sleeping threads' timers fire ahead of the runnable
    ones (``SLEEPERS``), not every timer as in a pool's fuzzing (``ALL_TIMERS``). A test orders
    its own tasks and threads with short sleeps (a disconnect 2.5 ms in, meant to land once the
    request runs), and its assertions know nothing of a timer fired a few milliseconds ahead of
    a ready task: a blind user's correct test failed so. The fuzzing harness's checks credit
    each jump; a test's own cannot. Timers may fire late instead (``late_timers``)."""

    fires_timers = SLEEPERS
    late_timers = True


class LatePCT(PCTScheduler):
    """``pct`` for an explored test: timers may fire late (``late_timers``), as for ``random``,
    and never early (a pool's fuzzing fires them early in every other PCT execution).

    Every other schedule is a uniform random walk instead (``SleepersOnlyRandom``'s), so the
    default finds what either strategy finds, each within twice its own count. A serving loop
    whose engine steps back to back keeps PCT's top priority, and its clients wait behind it
    while the change points fall inside its steps: on the batching example's four planted bugs,
    PCT alone found 14 of 20 (seeds 0-4, 200 schedules), up to schedule 155, where random found
    20 of 20 within 22; a blind team's evictor thread freeing an entry a lookup had just found
    fell to PCT within 28 schedules and to random in none of 1,000. Alternating: 20 of 20 within
    28, and the evictor race as PCT finds it."""

    late_timers = True
    timer_level = 0

    def __init__(self, depth: int = 3, seed: int | None = None) -> None:
        super().__init__(depth, seed)
        self._walk = False  # this schedule is a uniform random walk

    def _begin(self) -> bool:
        super()._begin()
        self._walk = self._executions % 2 == 0
        if self._walk:
            self.fires_timers = SleepersOnlyRandom.fires_timers
        return True

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        if self._walk:
            self._steps += 1  # its length counts among the runs PCT draws k from
            return runnable[self._rng.randrange(len(runnable))]
        return super()._pick(runnable, current)


class LateDFS(DFSScheduler):
    """``dfs`` for an explored test: timers may fire late (``late_timers``), as for ``random``."""

    late_timers = True


SEED_BITS = 32  # a seed short enough to read aloud; the schedule text carries the rest
STRATEGIES: dict[str, Callable[[int], Scheduler]] = {
    "pct": lambda seed: LatePCT(depth=3, seed=seed),
    "random": lambda seed: SleepersOnlyRandom(seed),
    "dfs": lambda seed: LateDFS(preemption_bound=2, seed=seed),
}


def check_strategy(strategy: object, name: str = "strategy") -> str:
    """``strategy`` if it names a strategy; ValueError naming ``name`` and the choices otherwise."""
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(
            f"{name} must be one of {', '.join(repr(s) for s in STRATEGIES)}, got {strategy!r} "
            f"({type(strategy).__name__})"
        )
    return strategy


def check_schedules(schedules: object, name: str = "schedules") -> int:
    """``schedules`` as an int >= 1; ValueError naming ``name`` otherwise."""
    if type(schedules) is not int or schedules < 1:
        raise ValueError(f"{name} must be an int >= 1, got {schedules!r} ({type(schedules).__name__})")
    return schedules


def pick_seed(seed: object, name: str = "seed") -> int:
    """``seed`` if given (an int in [0, 2**64)); None draws a fresh one, printed on failure."""
    if seed is None:
        return secrets.randbits(SEED_BITS)  # not `random`: pytest plugins reseed it per test
    if type(seed) is not int or not 0 <= seed < 1 << 64:
        raise ValueError(f"{name} must be None or an int in [0, 2**64), got {seed!r} ({type(seed).__name__})")
    return seed


def make_scheduler(strategy: str, seed: int, backend: str = "asyncio") -> Scheduler:
    """A fresh scheduler of ``strategy`` seeded with ``seed``. On trio, which offers no per-step
    choice, ``dfs`` has nothing to enumerate (it ran one schedule and called that every one it
    had, a blind user's): there it is the seeded random search every strategy is on trio."""
    if backend == "trio" and strategy == "dfs":
        strategy = "random"
    return STRATEGIES[strategy](seed)


REPLAY_TRIES = 20
"""How many times a replay is tried while its tries leave the schedule (work in real threads)."""


def read_schedule_file(path: str, name: str = "replay") -> str:
    """The schedule held in the file at ``path`` (``@path``: a long run's schedule, written
    beside the reports); ValueError naming ``name`` where it cannot be read."""
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        raise ValueError(f"{name}: cannot read the schedule file {path!r}: {reason}") from None


def replay_scheduler(schedule: object, name: str = "replay") -> ReplayScheduler:
    """A scheduler that replays ``schedule`` (its ``ks1:`` text, or ``@path``: a file holding
    it), up to ``REPLAY_TRIES`` times while each try diverges; ValueError naming ``name``."""
    if not isinstance(schedule, str):
        raise ValueError(
            f"{name} must be a 'ks1:...' schedule string, got {schedule!r} ({type(schedule).__name__})"
        )
    if schedule.startswith("@"):
        schedule = read_schedule_file(schedule[1:], name)
    try:
        return ReplayScheduler(schedule, REPLAY_TRIES)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
