"""Motifs: the smallest programs in which two protocol calls race, one per pair that can conflict.

A drawn scenario lines up two calls on one block only now and then; these programs do it every
time, and are small enough that every interleaving with one or two delays can be run
(``DelayBoundedScheduler``). They are the short tests a developer writes for a pool, derived
from the protocol alone, not from any pool's code:

- two holders of one shared block release it together (refcount, zero test, double offer);
- a share (retain) races a sharer's release of the same block;
- two acquirers race for the last free block (check-then-take, counter updates);
- releases come back to a waiter parked in acquire (wake-ups, reset before offer);
- an acquirer arrives as the blocks come back (a check outside the lock a wait releases);
- two waiters, releases in a row (a notify that wakes one where two could go);
- two tenancies of different blocks, taken and given back at once (free-queue and counter
  updates of unrelated blocks);
- for async pools: a waiter cancelled as its block is handed to it.
"""

from __future__ import annotations

from kvstress.scenarios._programs import HANDOFF_WAIT, Scenario, Step

SETTLE = HANDOFF_WAIT / 50
"""The short sleep that lets the others reach their waits first (virtual time under control)."""


def motifs(blocks: int, is_async: bool) -> tuple[Scenario, ...]:
    """The motifs for a pool of ``blocks`` blocks; ``is_async`` adds the cancellation motif."""
    wait: Step = ("wait", HANDOFF_WAIT)
    take_all: list[Step] = [("acquire", 0.0)] * blocks
    give_all: list[Step] = [("release", None)] * blocks
    waiter: Step = ("acquire", HANDOFF_WAIT)
    found = [
        _of([("acquire", 0.0), ("share", 1), ("release", None)], [wait, ("release", None)]),
        _of(
            [("acquire", 0.0), ("share", 1), ("share", 2), ("release", None)],
            [wait, ("release", None)],
            [wait, ("release", None)],
        ),
        _of([*take_all, ("release", None)], [("acquire", 0.0)]),
        _of([*take_all, ("sleep", SETTLE), *give_all], [waiter, ("release", None)]),
        _of([*take_all, ("sleep", SETTLE), *give_all], [("sleep", SETTLE), waiter, ("release", None)]),
        _of([*take_all, ("sleep", SETTLE), *give_all], [waiter], [waiter]),
        _of([("acquire", 0.0), ("release", None)], [("acquire", 0.0), ("release", None)]),
    ]
    if is_async:
        found.append(
            _of([*take_all, ("sleep", SETTLE), *give_all], [waiter], [("sleep", SETTLE), ("cancel", 1)])
        )
    return tuple(found)


def _of(*programs: list[Step]) -> Scenario:
    return Scenario(tuple(tuple(program) for program in programs))
