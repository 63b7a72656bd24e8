"""Schedules drawn by Hypothesis, so that shrinking a failure minimizes its schedule.

Two ways in: ``hypothesis_schedulers()`` is a strategy whose schedulers draw every decision from
the test case's data (``st.randoms(use_true_random=False)``), so Hypothesis shrinks the decisions
themselves; and any seeded scheduler built with ``seed=None`` inside ``@given`` takes its seed
from the global ``random`` module, which Hypothesis seeds per example (reproducible, though
nothing about the schedule shrinks).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from hypothesis import strategies as st

from kvstress.schedulers._base import OneShotScheduler


class HypothesisScheduler(OneShotScheduler):
    """Draws each decision from ``source``, a ``random.Random`` whose values come from Hypothesis.

    Option 0 continues the current task, so Hypothesis, which shrinks towards fewer and smaller
    draws, shrinks a failing run towards a short schedule that switches tasks only where it must
    (shortest first: it may keep two early preemptions rather than one late one). One execution
    per scheduler, so one per example: ``new_execution`` is False after it. ``schedule()``
    replays like any other.
    """

    name = "hypothesis"

    def __init__(self, source: random.Random) -> None:
        if not isinstance(source, random.Random):
            raise TypeError(f"source must be a random.Random from st.randoms(), got {type(source).__name__}")
        super().__init__(seed=0)
        self._source = source

    def _execution_seed_for_next(self) -> int:
        return self._source.getrandbits(64)

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        index = self._source.randrange(len(runnable))
        if current is None or current not in runnable:
            return runnable[index]
        if index == 0:
            return current
        return [task for task in runnable if task != current][index - 1]

    def __repr__(self) -> str:
        return f"HypothesisScheduler(<{self.choices_so_far} choices so far>)"


def hypothesis_schedulers() -> st.SearchStrategy[HypothesisScheduler]:
    """A strategy of ``HypothesisScheduler``s drawing from the example's data (they shrink)."""
    return st.randoms(use_true_random=False).map(HypothesisScheduler)
