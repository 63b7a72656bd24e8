"""PCT, probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi, Nagarakatte; ASPLOS 2010).

Each task gets a random priority when first seen, and the highest-priority runnable task always
runs. At d - 1 random steps (the change points, drawn from 1..k) the task about to run drops
below every task that was never lowered, so a run is priority-driven apart from d - 1
priority changes. For a bug of depth d (d ordering constraints between events) in a program of
n tasks and at most k decisions, one execution finds it with probability at least
1 / (n * k**(d - 1)), where uniform random scheduling's chance can be exponentially smaller.

k is learned: unless ``k`` is given, the first execution runs without change points and measures
its decisions. Every later one takes as its k the length of one of the last ``LENGTHS_KEPT``
executions, drawn at random, and its change points from 1..k. A fuzzer's executions differ in
length (each draws its own programs; a polling pool's run 142 to 2,197 decisions, median 200,
measured on PollingCasPool): with the longest as k, as the paper's fixed program has it, both
change points of a median execution fall inside it once in about 120 executions; with a length
drawn from the recent ones, about as often as the lengths match.

Known limit: a task that busy-waits (loops on ``await asyncio.sleep(0)`` until another task acts)
keeps its priority and starves the others, so such a program hits the driver's step bound.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import ClassVar

from kvstress.schedulers._base import SchedulerBase
from kvstress.schedulers._schedule import ALL_TIMERS

LENGTHS_KEPT = 64
"""How many recent executions' lengths PCT draws its k (and its hot count) from."""


class PCTScheduler(SchedulerBase):
    """PCT with depth ``depth`` (d >= 1; d = 1 is plain random-priority scheduling).

    ``k`` may seed the step estimate for the first execution; later ones draw theirs from the
    lengths of recent executions.
    """

    name = "pct"
    timer_level: ClassVar[int] = ALL_TIMERS
    """The ``fires_timers`` of every other execution (see ``__init__``); 0 keeps timers in order
    (an explored test's PCT: its assertions cannot credit a jump)."""

    def __init__(self, depth: int = 3, seed: int | None = None, *, k: int | None = None) -> None:
        if type(depth) is not int or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r} ({type(depth).__name__})")
        if k is not None and (type(k) is not int or k < 0):
            raise ValueError(f"k must be None or an int >= 0, got {k!r} ({type(k).__name__})")
        super().__init__(seed)
        self.depth = depth
        # Every other execution also offers timers due soon among its choices (``ALL_TIMERS``,
        # as random does): a background thread's periodic tick, which otherwise waits until every
        # other thread blocks, may then run inside a worker's window. Only every other: each
        # such jump shortens the run that PCT's change points are drawn over, and some races
        # want the longer run (a batch grant's partial leak went from 0.1 s to 5.7 s).
        self.fires_timers = 0
        self._executions = 0
        self._k = k or 0
        self._steps = 0
        self._lengths: deque[int] = deque(maxlen=LENGTHS_KEPT)
        # Hints: a controller sets ``hot`` before a decision taken inside a lost-update window
        # (a read of an attribute, before the store of it). One extra change point per
        # execution falls on the h-th hot decision, h drawn like k from recent hot counts.
        self.hot = False
        self._hot_seen = 0
        self._hot_counts: deque[int] = deque(maxlen=LENGTHS_KEPT)
        self._hot_change = 0
        # Tasks never lowered in this execution, highest priority first.
        self._ranked: list[int] = []
        # Lowered tasks -> the change point index j (1-based) that lowered them: all rank below
        # every task in _ranked, and a smaller j ranks higher (priority d - j, as in the paper).
        self._lowered: dict[int, int] = {}
        # Decision number (1-based) -> change point index j.
        self._change_at: dict[int, int] = {}
        # Every task given a priority in this execution (ranked or lowered).
        self._seen: set[int] = set()

    @property
    def k(self) -> int:
        """The step estimate the current execution's change points were drawn from."""
        return self._k

    @property
    def change_points(self) -> tuple[int, ...]:
        """The current execution's change points (decision numbers, 1-based), in index order."""
        return tuple(sorted(self._change_at, key=self._change_at.__getitem__))

    def _begin(self) -> bool:
        self._executions += 1
        self.fires_timers = self.timer_level if self._executions % 2 == 0 else 0
        if self._steps:
            self._lengths.append(self._steps)
            self._hot_counts.append(self._hot_seen)
        counts = [c for c in self._hot_counts if c]
        self._hot_change = self._rng.randint(1, self._rng.choice(counts)) if counts else 0
        self._hot_seen = 0
        self.hot = False
        if self._lengths:
            self._k = self._lengths[self._rng.randrange(len(self._lengths))]
        self._steps = 0
        self._ranked = []
        self._lowered = {}
        self._seen = set()
        # The paper draws the points independently of their index: point j lowers to d - j.
        points = self._rng.sample(range(1, self._k + 1), min(self.depth - 1, self._k))
        self._change_at = {step: j for j, step in enumerate(points, start=1)}
        return True

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        self._steps += 1
        ranked, seen = self._ranked, self._seen
        for task in runnable:
            if task not in seen:
                # A new task gets a uniformly random rank among the tasks not yet lowered.
                seen.add(task)
                ranked.insert(self._rng.randrange(len(ranked) + 1), task)
        chosen = self._highest(runnable)
        j = self._change_at.get(self._steps)
        if self.hot:
            self.hot = False
            self._hot_seen += 1
            if self._hot_seen == self._hot_change and j is None:
                j = self.depth  # below every change point of the paper's d - 1
        if j is not None:
            if chosen not in self._lowered:
                ranked.remove(chosen)
            self._lowered[chosen] = j  # as in the paper, even for a task lowered before
            chosen = self._highest(runnable)
        return chosen

    def _highest(self, runnable: Sequence[int]) -> int:
        candidates = set(runnable)
        for task in self._ranked:
            if task in candidates:
                return task
        lowered = self._lowered
        return min(runnable, key=lowered.__getitem__)
