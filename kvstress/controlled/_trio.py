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

Both are trio internals, with no public seam: ``trio_scheduling_hooks`` is the one place that
reaches for them, a test fails loudly when a trio release moves them, and then runs go on
unseeded, with one line on stderr saying so.
"""

from __future__ import annotations

import importlib
import random
import sys
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, TypeVarTuple

import trio
import trio.testing

from kvstress.schedulers._base import check_seed

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_INTERNALS = "trio._core._run"
_RNG = "_r"
_DETERMINISTIC_SWITCH = "_ALLOW_DETERMINISTIC_SCHEDULING"  # trio's name; its plugin flips it too
_warned = False


def trio_scheduling_hooks() -> tuple[random.Random, types.ModuleType] | None:
    """trio's scheduling RNG and the module holding its deterministic-scheduling switch.

    The one reach into trio's private API (trio has no public seam for this); None when this
    trio release keeps them elsewhere.
    """
    try:
        internals = importlib.import_module(_INTERNALS)
    except ImportError:
        return None
    rng = getattr(internals, _RNG, None)
    switch = getattr(internals, _DETERMINISTIC_SWITCH, None)
    if not isinstance(rng, random.Random) or not isinstance(switch, bool):
        return None
    return rng, internals


def _say_unseeded() -> None:
    global _warned
    if not _warned:
        _warned = True
        print(
            f"kvstress: trio {trio.__version__} keeps no scheduling RNG at {_INTERNALS}.{_RNG}: trio runs "
            "go on unseeded, so a trio finding may not replay exactly",
            file=sys.stderr,
        )


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
    clock = clock if clock is not None else trio.testing.MockClock(autojump_threshold=0)
    hooks = trio_scheduling_hooks()
    if hooks is None:
        _say_unseeded()
        return trio.run(async_fn, *args, clock=clock, instruments=instruments)
    rng, internals = hooks
    saved_state = rng.getstate()
    saved_switch = getattr(internals, _DETERMINISTIC_SWITCH)
    # Sorting each batch by creation order before the seeded shuffle is what removes the
    # address-dependent orders; the switch is trio's own hook for exactly this.
    setattr(internals, _DETERMINISTIC_SWITCH, True)
    rng.seed(seed)
    try:
        return trio.run(async_fn, *args, clock=clock, instruments=instruments)
    finally:
        setattr(internals, _DETERMINISTIC_SWITCH, saved_switch)
        rng.setstate(saved_state)


class TaskStepTrace(trio.abc.Instrument):
    """A trio instrument recording the name of each task as it takes a step (the interleaving)."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        """Record one step of ``task``."""
        self.steps.append(task.name)
