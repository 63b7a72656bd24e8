"""Guided: follow a list of choices as far as it fits, then never preempt. The shrinker's tool.

A shrinker edits a failing schedule (cuts it short, turns a switch into "keep running") and
needs to run the edit even where it no longer matches the program exactly. ``ReplayScheduler``
would stop with ``ScheduleDivergence``; this one takes a recorded choice when that task is
runnable, otherwise keeps the current task running (or takes the lowest runnable id), and after
the list ends keeps the current task running. Its own ``schedule()`` records what it actually
did, so a guided run that fails replays exactly with ``ReplayScheduler``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.schedulers._base import OneShotScheduler
from kvstress.schedulers._schedule import RANDOM_DRAW


class GuidedScheduler(OneShotScheduler):
    """One execution that follows ``choices`` where it can (see the module docstring).

    ``seed`` seeds the data stream, as a schedule's seed does; ``strategy`` is the name the
    recorded schedule carries (the strategy whose failure is being shrunk).
    """

    name = "guided"

    def __init__(self, choices: Sequence[int], seed: int, strategy: str = "guided") -> None:
        super().__init__(seed)
        self.guide = tuple(choices)
        self.strategy = strategy
        self._at = 0

    def _execution_seed_for_next(self) -> int:
        return self.seed

    def _strategy_name(self) -> str:
        return self.strategy

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        guide = self.guide
        while self._at < len(guide) and guide[self._at] == RANDOM_DRAW:
            self._at += 1  # a draw the edited run no longer makes here
        if self._at < len(guide):
            wanted = guide[self._at]
            self._at += 1
            if wanted in runnable:
                return wanted
        return current if current is not None and current in runnable else runnable[0]

    def _before_draw(self) -> None:
        if self._at < len(self.guide) and self.guide[self._at] == RANDOM_DRAW:
            self._at += 1
