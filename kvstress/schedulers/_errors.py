"""The one way a scheduler can find the program misbehaving: a run left the path it had to follow."""

from __future__ import annotations


class ScheduleDivergence(RuntimeError):
    """A run did not take the path a schedule (replay) or an earlier execution (DFS) recorded.

    Either the program is not deterministic under the scheduler (it reads the wall clock, real
    I/O, threads or an unseeded RNG), or the schedule belongs to another program or version.
    Raised by the scheduler, so it says which step diverged and what was expected there.
    """
