"""Delay-bounded search, hints first: systematic exploration of one small program.

A deterministic scheduler runs the program without preemption: the task that ran last goes
on while it can, else the lowest runnable id. A *delay* is one decision where another task runs
instead (Emmi, Qadeer and Rakamaric, "Delay-bounded scheduling", POPL 2011). Every interleaving
with at most ``bound`` delays is explored, each exactly once, and most concurrency bugs need one
or two (Musuvathi and Qadeer's observation for preemptions, PLDI 2007).

The order is what makes it fast. After each execution, every later decision of it becomes a
candidate for one more delay, and candidates are run best first:

- a delay at a *hot* decision (the controller's hint: a switch inside a lost-update window,
  after a line read an attribute and before the line that stores it) comes before any other;
- among the rest, fewer delays before more, and earlier decisions before later ones.

So a lost update between two tasks is reached within the first few executions, whatever the
program's length, where depth-first search (``DFSScheduler``) tries the switches of the
program's last lines first. A plan whose delay names a task that is not runnable there (the
program went another way) falls back to the default choice: the recorded schedule still replays
exactly what ran.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from kvstress.schedulers._base import SchedulerBase

MAX_PLANS = 20_000
"""Candidates kept waiting at most; past it, only plans whose every delay is hot are added."""


class DelayBoundedScheduler(SchedulerBase):
    """Every interleaving of one program with at most ``bound`` delays, hot ones first (see the
    module docstring); ``new_execution`` is False once all have run.

    Random values do not branch: every execution draws the same ``next_u64`` stream (from
    ``seed``), so one scheduler explores the interleavings of one program.
    """

    name = "delay"

    def __init__(self, bound: int = 2, seed: int = 0) -> None:
        if type(bound) is not int or bound < 0:
            raise ValueError(f"bound must be an int >= 0, got {bound!r} ({type(bound).__name__})")
        super().__init__(seed)
        self.bound = bound
        self.executions = 0
        self.hot = False  # set by a controller that gives hints, before a decision (see PCT)
        # (cold delays, delays, order) -> plan: {decision index: task}; order breaks ties FIFO.
        self._queue: list[tuple[int, int, int, tuple[tuple[int, int], ...]]] = [(0, 0, 0, ())]
        self._pushed = 1
        self._plan: dict[int, int] = {}
        self._last = -1  # the plan's latest delay
        self._cold = 0
        # This execution's decisions: (runnable, the default choice, hot).
        self._trace: list[tuple[tuple[int, ...], int, bool]] | None = []
        self._exhausted = False
        self.max_cold: int | None = None
        self.max_delays: int | None = None
        """When set, ``new_execution`` is False while the best plan left has more cold (not
        hot) delays than ``max_cold``, or more delays than ``max_delays``: a caller runs the
        one-delay hot plans of several programs first, then lifts the limits. ``exhausted``
        stays False until no plan is left at all."""

    @property
    def exhausted(self) -> bool:
        """True once every interleaving within the bound has run."""
        return self._exhausted

    @property
    def pending(self) -> int:
        """Candidate plans not run yet."""
        return len(self._queue)

    def _begin(self) -> bool:
        if self.executions and self._trace is not None:
            self._expand()
            self._trace = None  # expanded: a refused call below must not expand it again
        if not self._queue:
            self._exhausted = True
            return False
        cold, delays, _, _ = self._queue[0]
        if (self.max_cold is not None and cold > self.max_cold) or (
            self.max_delays is not None and delays > self.max_delays
        ):
            return False
        self._cold, _, _, plan = heapq.heappop(self._queue)
        self._plan = dict(plan)
        self._last = max(self._plan, default=-1)
        self._trace = []
        self.hot = False
        self.executions += 1
        return True

    def _execution_seed_for_next(self) -> int:
        return self.seed  # the same data in every execution: only the interleaving varies

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        hot, self.hot = self.hot, False
        default = current if current is not None and current in runnable else runnable[0]
        chosen = self._plan.get(len(self._trace or ()), default)
        if chosen not in runnable:
            chosen = default
        trace = self._trace
        assert trace is not None  # set by _begin for the execution in progress
        trace.append((tuple(runnable), default, hot))
        return chosen

    def _expand(self) -> None:
        """Queue the last execution's plan plus one more delay at each decision after its last."""
        delays, trace = len(self._plan), self._trace
        if delays >= self.bound or trace is None:
            return
        base = tuple(sorted(self._plan.items()))
        full = len(self._queue) >= MAX_PLANS
        for at in range(self._last + 1, len(trace)):
            runnable, default, hot = trace[at]
            cold = self._cold + (not hot)
            if full and cold:
                continue
            for task in runnable:
                if task != default:
                    heapq.heappush(self._queue, (cold, delays + 1, self._pushed, (*base, (at, task))))
                    self._pushed += 1
