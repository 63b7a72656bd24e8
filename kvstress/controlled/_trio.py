"""Seeded, replayable trio runs, with the control trio itself offers.

How far control goes: trio runs tasks in batches (all tasks that became runnable since the last
batch) and orders each batch with its one module-level RNG, ``trio._core._run._r``. Seeding that
RNG, with trio's deterministic-scheduling switch on (what trio's own Hypothesis plugin turns
on; without it, equal deadlines are ordered by object address), and running on
``MockClock(autojump_threshold=0)`` (virtual time that jumps as soon as every task is blocked)
makes a run a function of its seed: same seed, same interleaving, same failure. That is all:
there is no per-step choice, so no PCT, no bounded search, no schedule string beyond the seed,
and only orders within a batch are reachable. Real I/O, threads and the wall clock stay
uncontrolled. Under ``@given``, trio's plugin registers ``_r`` with Hypothesis, so plain
``trio.run`` is already seeded per example; ``seeded_trio_run`` makes that explicit.

The RNG and the switch are process-wide: run one seeded run at a time (not from threads).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, TypeVarTuple

import trio
import trio.testing
from trio._core import _run as trio_run_internals

from kvstress.schedulers._base import check_seed

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_DETERMINISTIC_SWITCH = "_ALLOW_DETERMINISTIC_SCHEDULING"  # trio's name; its plugin flips it too


def seeded_trio_run(
    async_fn: Callable[[*Ts], Awaitable[T]],
    *args: *Ts,
    seed: int,
    clock: trio.abc.Clock | None = None,
    instruments: Sequence[trio.abc.Instrument] = (),
) -> T:
    """``trio.run(async_fn, *args)`` with its scheduling RNG seeded by ``seed`` (in [0, 2**64)).

    ``clock`` defaults to ``MockClock(autojump_threshold=0)``: virtual time. trio's RNG state and
    deterministic-scheduling switch are restored afterwards, so other runs are unaffected.
    """
    seed = check_seed(seed)
    rng = trio_run_internals._r
    saved_state = rng.getstate()
    saved_switch = getattr(trio_run_internals, _DETERMINISTIC_SWITCH)
    # Sorting each batch by creation order before the seeded shuffle is what removes the
    # address-dependent orders; the switch is trio's own hook for exactly this.
    setattr(trio_run_internals, _DETERMINISTIC_SWITCH, True)
    rng.seed(seed)
    try:
        return trio.run(
            async_fn,
            *args,
            clock=clock if clock is not None else trio.testing.MockClock(autojump_threshold=0),
            instruments=instruments,
        )
    finally:
        setattr(trio_run_internals, _DETERMINISTIC_SWITCH, saved_switch)
        rng.setstate(saved_state)


class TaskStepTrace(trio.abc.Instrument):
    """A trio instrument recording the name of each task as it takes a step (the interleaving)."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        """Record one step of ``task``."""
        self.steps.append(task.name)
