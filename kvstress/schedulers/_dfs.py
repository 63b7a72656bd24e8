"""Bounded exhaustive search: every interleaving with at most ``preemption_bound`` preemptions.

Depth-first over the tree of decisions, stateless: each execution replays the previous one's
choices up to the deepest decision that still has an untried option, takes that option, and
then always tries the first option. A preemption is a switch away from a task that could have
continued; options list the current task first, so an execution's first path is the
non-preemptive one. Most concurrency bugs need few preemptions (Musuvathi & Qadeer, PLDI 2007),
so a small bound covers them while keeping the count polynomial in the program's length.

The program must be deterministic given the choices: if a replayed decision sees other runnable
tasks than it did before, ``ScheduleDivergence`` says where. Random values do not branch: every
execution draws the same ``next_u64`` stream (seeded by ``seed``), so the search covers
interleavings, not data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvstress.schedulers._base import SchedulerBase
from kvstress.schedulers._errors import ScheduleDivergence


@dataclass
class _Branch:
    """One decision of the current path. Invariant: 0 <= taken < allowed <= len(options)."""

    options: tuple[int, ...]  # runnable tasks, the current one first when it could continue
    allowed: int  # how many leading options the preemption bound permits here
    taken: int  # the option this execution takes
    current: int | None = None  # the task that ran last when the decision was made


DIVERGED_TRIES = 3
"""How many times in a row an execution may leave its path before the divergence is raised."""


class DFSScheduler(SchedulerBase):
    """Enumerates interleavings depth-first; ``new_execution`` is False once all are done.

    ``preemption_bound=None`` removes the bound (exhaustive; exponential in the program).
    """

    name = "dfs"

    def __init__(self, preemption_bound: int | None = 2, seed: int = 0) -> None:
        if preemption_bound is not None and (type(preemption_bound) is not int or preemption_bound < 0):
            raise ValueError(
                f"preemption_bound must be None or an int >= 0, got {preemption_bound!r} "
                f"({type(preemption_bound).__name__})"
            )
        super().__init__(seed)
        self.preemption_bound = preemption_bound
        self.executions = 0
        self._path: list[_Branch] = []
        self._at = 0  # decisions made in the current execution
        self._preemptions = 0
        self._exhausted = False
        self._retry = False  # the next execution runs the last one's path again (``again``)
        self.diverged = 0  # executions in a row that left their path
        self._left: tuple[int, tuple[int, ...], int | None] | None = None  # where the last one did
        self._left_before: tuple[int, tuple[int, ...], int | None] | None = None
        self._adopt = False  # the next execution takes its own options where it leaves the path

    def again(self) -> bool:
        """After an execution that left its path (``ScheduleDivergence``): whether to run that
        path once more, up to ``DIVERGED_TRIES`` times in a row. Work in real threads that a run
        cannot hold to its schedule (a machine's load moving a thread's timing) does so once in
        a while; a program that does it every time still fails. Where two tries in a row left
        the path at the same point alike, the execution that recorded it was the odd one: the
        next takes its own options from there (its subtree is enumerated afresh)."""
        self.diverged += 1
        if self.diverged >= DIVERGED_TRIES:
            return False
        # Two tries that left the path alike agree with each other, not with the execution that
        # recorded it: that one was the odd one, and the next takes its own options from there.
        self._adopt = self._left is not None and self._left == self._left_before
        self._left_before = self._left
        self._retry = True
        return True

    @property
    def exhausted(self) -> bool:
        """True once every interleaving within the bound has been run."""
        return self._exhausted

    def _begin(self) -> bool:
        if self._exhausted:
            return False
        path = self._path
        if self._retry:
            self._retry = False
            self._at = 0
            self._preemptions = 0
            return True
        self.diverged, self._left, self._left_before, self._adopt = 0, None, None, False
        if self.executions:
            del path[self._at :]  # a shorter run leaves no stale decisions behind
            while path and path[-1].taken + 1 >= path[-1].allowed:
                path.pop()
            if not path:
                self._exhausted = True
                return False
            path[-1].taken += 1
        self.executions += 1
        self._at = 0
        self._preemptions = 0
        return True

    def _execution_seed_for_next(self) -> int:
        return self.seed  # the same data in every execution: only the interleaving varies

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        # The current task first: option 0 never preempts, so each new path starts preemption-free.
        if current is not None and current in runnable:
            can_continue, options = True, (current, *(task for task in runnable if task != current))
        else:
            can_continue, options = False, tuple(runnable)
        at = self._at
        self._at += 1
        if at < len(self._path) and self._path[at].options != options and self._adopt:
            self._adopt = False
            del self._path[at:]  # recorded by an odd execution: this one records its own
        if at < len(self._path):
            branch = self._path[at]
            if branch.options != options:
                self._left = (at, options, current)
                raise ScheduleDivergence(
                    f"DFS decision {at}: {_state(options, current)}, where the earlier execution "
                    f"had {_state(branch.options, branch.current)}: the program is not deterministic "
                    "under the scheduler, which dfs needs (work handed to real threads, to_thread or an "
                    "executor, comes back at other points each time; random and pct explore such a "
                    "program)"
                )
        else:
            bounded = self.preemption_bound is not None and self._preemptions >= self.preemption_bound
            branch = _Branch(options, 1 if can_continue and bounded else len(options), 0, current)
            self._path.append(branch)
        if branch.taken and can_continue:
            self._preemptions += 1
        return branch.options[branch.taken]


def _state(options: tuple[int, ...], current: int | None) -> str:
    """``runnable tasks [0, 3], task 3 running``: the runnable set alone read the same in both
    executions where only the running task differed (a blind user's)."""
    running = "none running" if current is None or current not in options else f"task {current} running"
    return f"runnable tasks {sorted(options)}, {running}"
