"""The flight recorder: where a fuzzing child is, for the supervisor that outlives it.

A supervised child (``kvstress.fuzz._isolate``) attaches a small array in shared memory; the
fuzz loop writes the slice it starts (index, strategy, seed) and every execution bumps a
counter. When a pool kills the child, the supervisor reads the last values: the execution in
flight, and what replays the run up to it. Unattached (an ordinary run), every call is one
``is None`` test.
"""

from __future__ import annotations

import time
from collections.abc import MutableSequence

STRATEGY_CODES = ("contract", "delay", "pct", "random", "machine", "stress")
"""The strategies, by their code in the record (index + 1; 0: no slice started yet)."""

SLICE, STRATEGY, SEED, EXECUTION, STARTED_US = range(5)
FIELDS = 5

_record: MutableSequence[int] | None = None


def attach(record: MutableSequence[int] | None) -> None:
    """Record into ``record`` (``FIELDS`` signed 64-bit ints, shared with the supervisor)."""
    global _record
    _record = record


def run_started() -> None:
    """The search begins now (wall clock, microseconds): a death's time counts from here."""
    record = _record
    if record is not None:
        record[STARTED_US] = time.time_ns() // 1000


def slice_started(index: int, strategy: str, seed: int) -> None:
    """A slice of ``strategy`` with ``seed`` begins; its executions count from zero."""
    record = _record
    if record is not None:
        record[EXECUTION] = 0
        record[SLICE] = index
        record[STRATEGY] = STRATEGY_CODES.index(strategy) + 1 if strategy in STRATEGY_CODES else 0
        record[SEED] = seed


def execution_started() -> None:
    """One more execution (a controlled run, a stress run, a state-machine example) begins."""
    record = _record
    if record is not None:
        record[EXECUTION] += 1


def strategy_of(code: int) -> str:
    """The strategy a record's code names ("" before any slice)."""
    return STRATEGY_CODES[code - 1] if 1 <= code <= len(STRATEGY_CODES) else ""
