"""Replay: run one execution exactly as a recorded ``Schedule`` says, or say where it diverged."""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.schedulers._base import OneShotScheduler
from kvstress.schedulers._errors import ScheduleDivergence
from kvstress.schedulers._schedule import RANDOM_DRAW, TIMER_LANE, Schedule


class ReplayScheduler(OneShotScheduler):
    """Replays ``schedule`` (a ``Schedule`` or its ``ks1:`` text) for one execution (up to
    ``tries`` where executions diverge and the caller asks ``again``).

    Task choices are taken from the schedule, random values are regenerated from its seed, and
    the replay's own ``schedule()`` equals the original. A run that asks for a task the schedule
    did not choose, a random value where it chose a task (or the reverse), or more decisions than
    it holds raises ``ScheduleDivergence``. ``new_execution`` is True once, then False (until
    ``again``).
    """

    name = "replay"

    def __init__(self, schedule: Schedule | str, tries: int = 1) -> None:
        if isinstance(schedule, str):
            schedule = Schedule.decode(schedule)
        elif not isinstance(schedule, Schedule):
            raise TypeError(f"schedule must be a Schedule or its encoded str, got {type(schedule).__name__}")
        super().__init__(schedule.seed)
        self.replayed = schedule
        self.tries = tries
        self.tried = 0  # executions started
        self.diverged = 0  # of them, those that left the schedule

    def _begin(self) -> bool:
        started = super()._begin()
        self.tried += started
        return started

    def again(self) -> bool:
        """After an execution that diverged: whether it may be tried once more (then the next
        ``new_execution`` starts the schedule over). Work handed to real threads runs outside
        the schedule, and comes back at another point of it from one try to the next."""
        self.diverged += 1
        if self.tried >= self.tries:
            return False
        self._used = False
        return True

    @property
    def finished(self) -> bool:
        """True when the run has consumed every recorded choice."""
        return self.choices_so_far == len(self.replayed.choices)

    def _execution_seed_for_next(self) -> int:
        return self.replayed.seed

    def _strategy_name(self) -> str:
        return self.replayed.strategy

    def _timers(self) -> int:
        return self.replayed.timers

    @property
    def fires_timers(self) -> int:  # type: ignore[override]
        """As the recorded execution did."""
        return self.replayed.timers

    def _late(self) -> bool:
        return self.replayed.late

    @property
    def late_timers(self) -> bool:  # type: ignore[override]
        """As the recorded execution did."""
        return self.replayed.late

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        chosen = self._expected("a task")
        if chosen == RANDOM_DRAW:
            self._diverged(
                f"the run asks for a task among {list(runnable)}, but the schedule drew a random value here"
            )
        if chosen not in runnable:
            self._diverged(
                f"the schedule chose {_choice(chosen)}, but the runnable tasks are {list(runnable)}"
            )
        return chosen

    def _before_draw(self) -> None:
        chosen = self._expected("a random value")
        if chosen != RANDOM_DRAW:
            self._diverged(f"the run asks for a random value, but the schedule chose task {chosen} here")

    def _expected(self, wanted: str) -> int:
        choices = self.replayed.choices
        if self.choices_so_far >= len(choices):
            self._diverged(f"the run asks for {wanted}, but the schedule ends after {len(choices)} choices")
        return choices[self.choices_so_far]

    def _diverged(self, what: str) -> None:
        raise ScheduleDivergence(
            f"replay diverged at choice {self.choices_so_far}: {what}. The program is not deterministic "
            "under the scheduler (work handed to real threads, an executor's or to_thread's, runs "
            "outside the schedule and comes back when it will; a set of objects, ordered by their "
            "id(), is iterated in another order each process), or the schedule was recorded from "
            "another program"
        )


def _choice(chosen: int) -> str:
    """A recorded choice as a reader knows it: a task's id, or a timer's firing."""
    if chosen >= TIMER_LANE:
        return f"to fire timer {chosen - TIMER_LANE} (choice {chosen})"
    return f"task {chosen}"
