"""A correct pool whose module, inside a fuzzing child only, breaks one of kvstress's own checks.

kvstress then fails in its own code, with no frame of the pool's on the way: that must end as
kvstress's internal error (exit 3, its traceback kept), never as a finding against the pool.
"""

from __future__ import annotations

import functools
import multiprocessing

import kvstress.checkers
from kvstress.mutants import CondvarPool

if multiprocessing.current_process().name.startswith("kvstress-fuzz-"):
    # Called as kvstress.checkers.check_wakeups(history, ...) from kvstress's own code: a C
    # callable, so the TypeError it raises has only kvstress's frames on its way.
    kvstress.checkers.check_wakeups = functools.partial(int, "kvstress broken on purpose")


class CorrectPool(CondvarPool):
    """The corpus's lock-and-condition pool, unchanged."""
