"""The scheduler interface, and the base class every strategy builds on to record its choices.

A scheduler lives across many executions of one test. The driver (a controlled event loop, or a
thread scheduler) calls ``new_execution()`` before each execution and stops when it returns
False; during the execution it calls ``next_task`` wherever two or more tasks could run next and
``next_u64`` whenever the program needs a random value. ``schedule()`` then says what the
execution chose, as a ``Schedule`` that ``ReplayScheduler`` replays exactly.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Protocol

from kvstress.schedulers._schedule import RANDOM_DRAW, Schedule

_U64 = 1 << 64


class Scheduler(Protocol):
    """Decides which task runs next and which random values a run sees.

    Task ids are small ints that the driver keeps stable within an execution (the controlled
    loop numbers tasks in creation order, 0 being plain callbacks). All randomness of a run goes
    through ``next_u64``, so replaying the schedule replays the data too.
    """

    def new_execution(self) -> bool:
        """Start an execution; False when the strategy has nothing left to explore."""

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        """Pick one of ``runnable`` (distinct ids, ascending, non-empty) to run next.

        ``current`` is the task that ran last (None before the first decision); choosing another
        task while ``current`` is still runnable is a preemption. Drivers may skip the call when
        only one task can run, and the controlled loop does.
        """

    def next_u64(self) -> int:
        """The run's next random value, uniform in [0, 2**64)."""

    def schedule(self) -> Schedule:
        """The choices of the current (or last) execution so far."""

    # Optional: ``fires_timers`` (an int attribute, 0 when absent: ``SLEEPERS`` or ``ALL_TIMERS``,
    # see ``Schedule.timers``) asks the thread baton to offer sleeping threads among the runnable
    # ones, and with ``ALL_TIMERS`` the controlled loop its next timers among the ready tasks;
    # choosing one fires its timer early. ``late_timers`` (a bool attribute, False when absent,
    # see ``Schedule.late``) asks the controlled loop to offer, at each jump of virtual time,
    # every timer due within ``LATE_WINDOW`` of the next one: choosing a later one fires the
    # earlier ones late.


def check_seed(seed: int | None) -> int:
    """A seed in [0, 2**64); None draws one from the global ``random`` module.

    The global module is what Hypothesis seeds per example, so an unseeded scheduler inside a
    ``@given`` test is still reproducible there.
    """
    if seed is None:
        return random.getrandbits(64)
    if type(seed) is not int or not 0 <= seed < _U64:
        raise ValueError(f"seed must be an int in [0, 2**64) or None, got {seed!r} ({type(seed).__name__})")
    return seed


class SchedulerBase(ABC):
    """Records every choice and owns the run's randomness; a strategy supplies the decisions.

    Two RNGs, both seeded from ``seed``: ``_rng`` is the strategy's own (priorities, coin
    flips, per-execution seeds), and ``_data`` serves ``next_u64``, reseeded from the
    execution's seed at each ``new_execution``. Keeping the data stream apart is what lets a
    schedule store only the positions of random draws, never their values.

    Subclasses set ``name``, implement ``_begin`` and ``_pick``, and may override
    ``_execution_seed_for_next`` (DFS keeps one data stream for all executions), ``_before_draw``
    and ``_strategy_name`` (replay checks and keeps the recorded schedule).
    """

    name: ClassVar[str]
    fires_timers: int = 0  # see ``Scheduler`` (PCT sets it per execution)
    late_timers: ClassVar[bool] = False  # see ``Scheduler``

    def __init__(self, seed: int | None = None) -> None:
        self.seed = check_seed(seed)
        self._rng = random.Random(self.seed)
        self._data = random.Random()
        self._execution_seed = 0
        self._choices: list[int] = []
        # Invariant: True exactly between a new_execution() that returned True and the next call.
        self._running = False

    def new_execution(self) -> bool:
        """Start the next execution; False (and nothing started) when there is nothing left."""
        self._running = False
        if not self._begin():
            return False
        self._execution_seed = self._execution_seed_for_next()
        self._data.seed(self._execution_seed)
        self._choices = []
        self._running = True
        return True

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        """Pick the next task among ``runnable`` (see ``Scheduler.next_task``) and record it."""
        if not self._running:
            self._not_running("next_task")
        if not runnable:
            raise ValueError("next_task: runnable must name at least one task, got an empty sequence")
        chosen = self._pick(runnable, current)
        self._choices.append(chosen)
        return chosen

    def next_u64(self) -> int:
        """The execution's next random value in [0, 2**64), from its seeded data stream."""
        if not self._running:
            self._not_running("next_u64")
        self._before_draw()
        self._choices.append(RANDOM_DRAW)
        return self._data.getrandbits(64)

    def schedule(self) -> Schedule:
        """The choices of the current (or last) execution so far."""
        return Schedule(
            self._strategy_name(), self._execution_seed, tuple(self._choices), self._timers(), self._late()
        )

    def _timers(self) -> int:
        return self.fires_timers

    def _late(self) -> bool:
        return self.late_timers

    @property
    def choices_so_far(self) -> int:
        """How many choices (task picks and random draws) the current execution made so far."""
        return len(self._choices)

    @abstractmethod
    def _begin(self) -> bool:
        """Prepare the next execution; False when the strategy has nothing left to explore."""

    @abstractmethod
    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        """Choose one id of ``runnable`` (non-empty, ascending)."""

    def _execution_seed_for_next(self) -> int:
        return self._rng.getrandbits(64)

    def _before_draw(self) -> None:
        """A hook called before each random draw is recorded (replay checks its position)."""
        return None

    def _strategy_name(self) -> str:
        return self.name

    def _not_running(self, method: str) -> None:
        raise RuntimeError(
            f"{type(self).__name__}.{method} called outside an execution: call new_execution() "
            "first, and stop when it returns False"
        )


class OneShotScheduler(SchedulerBase):
    """A strategy with exactly one execution (replay, a Hypothesis example): then it is done."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self._used = False

    def _begin(self) -> bool:
        if self._used:
            return False
        self._used = True
        return True
