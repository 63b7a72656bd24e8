"""The motif of a waiter's deadline landing as a block comes back, the waiter then giving back
what it got, two others parked and giving back in turn: a timed-out waiter that took a wake-up
and left it counted makes the next release wake nobody (.NET's SemaphoreSlim before it
decremented its pulse count on every wake, rebuilt blind: missed at --budget 20 and 40 without
this motif)."""

from __future__ import annotations

from dataclasses import replace

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import SETTLE, motifs
from kvstress.schedulers import PCTScheduler, RandomScheduler
from tests.pools.pulse_count import PulseCountPool, PulseCountSuccessOnlyPool


def _motif() -> object:
    leaving = (("sleep", SETTLE / 2), ("acquire", SETTLE / 2), ("release", None))
    (found,) = [m for m in motifs(2, False) if m.programs[1:2] == (leaving,)]
    return found


def test_the_motif_is_run_on_virtual_time_only() -> None:
    leaving = (("sleep", SETTLE / 2), ("acquire", SETTLE / 2), ("release", None))
    assert not any(m.programs[1:2] == (leaving,) for m in motifs(2, False, virtual=False))
    assert len(_motif().programs) == 4  # type: ignore[attr-defined]


def test_a_wake_up_left_counted_by_a_timed_out_waiter_is_found() -> None:
    config = replace(ScenarioConfig(PulseCountSuccessOnlyPool, False), scenario=_motif())
    for scheduler in (RandomScheduler(seed=0), PCTScheduler(seed=0)):
        result = search(config, scheduler, max_executions=300, budget_s=60.0, shrink=False)
        assert result.failure is not None, scheduler
        assert result.failure.violation.invariant == "lost-wakeup"


def test_a_pool_that_takes_back_every_wake_up_comes_through() -> None:
    config = replace(ScenarioConfig(PulseCountPool, False), scenario=_motif())
    for scheduler in (RandomScheduler(seed=3), PCTScheduler(seed=1)):
        result = search(config, scheduler, max_executions=300, budget_s=60.0, shrink=False)
        assert result.failure is None, result.failure and result.failure.violation
