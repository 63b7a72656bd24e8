"""Delay-bounded search, hints first: systematic exploration of one small program.

A deterministic scheduler runs the program without preemption: the task that ran last goes
on while it can, else the lowest runnable id. A *delay* is one decision where another task runs
instead (Emmi, Qadeer and Rakamaric, "Delay-bounded scheduling", POPL 2011). Every interleaving
with at most ``bound`` delays is explored, each exactly once, and most concurrency bugs need one
or two (Musuvathi and Qadeer's observation for preemptions, PLDI 2007).

The order is what makes it fast. After each execution, every later decision of it becomes a
candidate for one more delay, and candidates are run best first:

- a delay at a *hot* decision (the controller's hint: a switch inside a lost-update window,
  after a line read an attribute and before the line that stores it, or inside a
  check-then-park window, before a ``wait``) comes before any other; a delay at a *warm*
  decision (the first after a thread published: released a lock or a semaphore, set an event)
  is not counted cold, and ranks after hot ones at equal count of delays;
- among the rest, fewer delays before more, and earlier decisions before later ones;
- at equal rank, a delay inside the run of a task just woken (its first ``WAKE_WINDOW``
  decisions while it runs on) comes first: the hand-off, where a woken waiter is preempted as
  it takes its block (JDK-6801020's shared release without PROPAGATE).

So a lost update between two tasks is reached within the first few executions, whatever the
program's length, where depth-first search (``DFSScheduler``) tries the switches of the
program's last lines first. A plan whose delay names a task that is not runnable there (the
program went another way) falls back to the default choice: the recorded schedule still replays
exactly what ran.

With ``woken_first``, where the controller tells which task the last one just woke (the
thread baton and the controlled loop do), every plan is also run from a second base schedule,
ahead of the first at equal rank: the woken task runs at once and goes on while it can, as on a
multiprocessor, where a woken thread does not wait for its waker to park, and as asyncio's own
first-in-first-out ready queue runs a woken task before its waker's next step. A hand-off
race sits at the wake-up: a waiter that takes its block before the releaser's next line (a reset
after the offer, a second release that finds the wake-up spent, a queue put before the block is
zeroed) is no delay at all from this base, where from the other it is one delay at one
decision among hundreds. A plan whose run from the woken-first base never let the base change a
choice (nothing was woken, or the woken task was the default anyway) would run the same
execution from the other base: it does not run again there, and its next plans for that base
are queued from the run it had. Where nothing is ever woken, that halves the runs; an
interleaving may still run once from each base under two different plans.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from kvstress.schedulers._base import SchedulerBase

_WOKEN_FIRST, _WAKER_GOES_ON = 0, 1  # the two base schedules, in the order they rank

WAKE_WINDOW = 32
"""The most decisions of a woken task's run that count as its hand-off: among plans of equal
rank, a delay in one comes first (see ``_expand``)."""

MAX_PLANS = 20_000
"""Candidates kept waiting at most; past it, only plans whose every delay is hot are added."""


class DelayBoundedScheduler(SchedulerBase):
    """Every interleaving of one program with at most ``bound`` delays, hot ones first (see the
    module docstring); ``new_execution`` is False once all have run.

    Random values do not branch: every execution draws the same ``next_u64`` stream (from
    ``seed``), so one scheduler explores the interleavings of one program.
    """

    name = "delay"
    broad_hints = True
    """Asks the thread controller for more hints than the lost-update windows: the
    check-then-park windows (``park_lines``) as hot decisions, and, as warm ones (``warm``), the
    first decision after a thread published (released a lock or a semaphore, set an event),
    where a check made in one critical section and acted on in the next goes stale (a block made
    for the caller and put in the shared queue, taken by another thread before the caller takes
    it back out). Here a hint ranks plans, where PCT would spread its one hinted change point.
    Every lock release publishes, so warm delays rank after hot ones: as hot, they took the
    one-delay lost updates two to five times the runs (``RetainLostUpdatePool`` 74 to 182)."""

    def __init__(self, bound: int = 2, seed: int = 0, *, woken_first: bool = False) -> None:
        if type(bound) is not int or bound < 0:
            raise ValueError(f"bound must be an int >= 0, got {bound!r} ({type(bound).__name__})")
        super().__init__(seed)
        self.bound = bound
        self.executions = 0
        self.hot = False  # set by a controller that gives hints, before a decision (see PCT)
        self.warm = False
        """Set by a controller that gives broad hints, before a decision: the first after a
        thread published (released a lock or a semaphore, set an event). A delay there ranks
        after one at a hot decision and before a cold one, at equal count of delays."""
        self.woken: int | None = None
        """Set by a controller that tells it, before a decision: a task that was not runnable at
        the decision before, woken by the one that ran (``woken_first`` runs it next)."""
        # (cold delays, delays, warm delays, delays far from a wake-up, base, order, plan); the
        # plan is {decision index: task}, base _WOKEN_FIRST or _WAKER_GOES_ON; order breaks ties
        # FIFO. A warm delay is not cold: it may run in a round of hot plans, after them.
        bases = (_WOKEN_FIRST, _WAKER_GOES_ON) if woken_first else (_WAKER_GOES_ON,)
        self._queue: list[tuple[int, int, int, int, int, int, tuple[tuple[int, int], ...]]] = [
            (0, 0, 0, 0, base, order, ()) for order, base in enumerate(bases)
        ]
        self._pushed = len(bases)
        self._base = _WAKER_GOES_ON
        self._plan: dict[int, int] = {}
        self._last = -1  # the plan's latest delay
        self._cold = 0
        self._warm = 0
        self._far = 0
        self._waking: int | None = None  # the task woken last, while it runs on since
        self._since_wake = 0  # its decisions since
        # This execution's decisions: (runnable, the default choice, hot, warm, near a wake-up).
        self._trace: list[tuple[tuple[int, ...], int, bool, bool, bool]] | None = []
        self._exhausted = False
        self._mattered = False  # whether this execution's base changed a choice
        self._bases_twinned = woken_first  # two bases, whose runs may be one
        self._waiting: set[tuple[tuple[int, int], ...]] = {()} if woken_first else set()
        """The plans queued from the other base (the waker goes on), not run yet."""
        self._twins: set[tuple[tuple[int, int], ...]] = set()
        """Those of them whose run from the woken-first base never let the base change a choice:
        from the other base they would run the same execution, so they do not run (``_expand``)."""
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
        """Candidate plans queued and not run yet, those known to be twins left out (a bound:
        more may turn out twins, and each run queues more)."""
        return len(self._queue) - len(self._twins)

    def _begin(self) -> bool:
        if self.executions and self._trace is not None:
            self._expand()
            self._trace = None  # expanded: a refused call below must not expand it again
        queue = self._queue
        while queue and queue[0][4] == _WAKER_GOES_ON and queue[0][6] in self._twins:
            self._twins.discard(heapq.heappop(queue)[6])  # run already, from the other base
        if not queue:
            self._exhausted = True
            return False
        cold, delays = queue[0][:2]
        if (self.max_cold is not None and cold > self.max_cold) or (
            self.max_delays is not None and delays > self.max_delays
        ):
            return False
        self._cold, _, self._warm, self._far, self._base, _, plan = heapq.heappop(self._queue)
        self._waking = None
        if self._base == _WAKER_GOES_ON:
            self._waiting.discard(plan)
        self._plan = dict(plan)
        self._last = max(self._plan, default=-1)
        self._trace = []
        self._mattered = False
        self.hot = self.warm = False
        self.executions += 1
        return True

    def _execution_seed_for_next(self) -> int:
        return self.seed  # the same data in every execution: only the interleaving varies

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        hot, self.hot = self.hot, False
        warm, self.warm = self.warm and not hot, False
        woken, self.woken = self.woken, None
        default = current if current is not None and current in runnable else runnable[0]
        planned = self._plan.get(len(self._trace or ()), -1)
        chosen = planned if planned in runnable else default
        if self._base == _WOKEN_FIRST and woken is not None and woken in runnable:
            if planned not in runnable:
                # The choice this base makes, where the other would have gone on with default.
                self._mattered = self._mattered or default != woken
                chosen = woken
            default = woken
        trace = self._trace
        assert trace is not None  # set by _begin for the execution in progress
        if woken is not None and woken == default:
            self._waking, self._since_wake = woken, 0
        elif default != self._waking:
            self._waking = None
        near = self._waking is not None and self._since_wake < WAKE_WINDOW
        self._since_wake += 1
        trace.append((tuple(runnable), default, hot, warm, near))
        return chosen

    def _expand(self) -> None:
        """Queue the last execution's plan plus one more delay at each decision after its last."""
        delays, trace = len(self._plan), self._trace
        if trace is None:
            return
        base = tuple(sorted(self._plan.items()))
        bases = [self._base]
        if self._base == _WOKEN_FIRST and not self._mattered and base in self._waiting:
            # The other base would run this very execution: its plans are queued now, from this
            # run's decisions, and the plan does not run from it (``_begin``).
            self._waiting.discard(base)
            self._twins.add(base)
            bases.append(_WAKER_GOES_ON)
        if delays >= self.bound:
            return
        full = len(self._queue) >= MAX_PLANS
        for at in range(self._last + 1, len(trace)):
            runnable, default, hot, warm, near = trace[at]
            cold, far = self._cold + (not hot and not warm), self._far + (not near)
            warmth = self._warm + warm
            if full and cold:
                continue
            for task in runnable:
                if task != default:
                    plan = (*base, (at, task))
                    for which in bases:
                        heapq.heappush(
                            self._queue, (cold, delays + 1, warmth, far, which, self._pushed, plan)
                        )
                        self._pushed += 1
                        if which == _WAKER_GOES_ON and self._bases_twinned:
                            self._waiting.add(plan)
