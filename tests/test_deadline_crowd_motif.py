"""The motif of a waiter's deadline landing as a block comes back, two others parked: the leaving
waiter must pass on at most the wake-up it took (asyncio.Lock's bpo-32734, rebuilt blind: found
on one seed of three, at 22.8 s, when the motif had one other waiter parked)."""

from __future__ import annotations

from dataclasses import replace

import kvstress
from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import SETTLE, motifs
from kvstress.schedulers import DelayBoundedScheduler, RandomScheduler
from tests.pools.wake_first import WakeFirstNotDonePool, WakeFirstPool


def _deadline_motif() -> object:
    leaving = (("sleep", SETTLE / 2), ("acquire", SETTLE / 2))
    (found,) = [m for m in motifs(2, True) if m.programs[1:2] == (leaving,)]
    return found


def test_the_motif_parks_two_beside_the_waiter_whose_deadline_lands() -> None:
    programs = _deadline_motif().programs  # type: ignore[attr-defined]
    assert len(programs) == 4
    assert not any(f"acquire({SETTLE / 2:g})" in m.describe() for m in motifs(2, True, virtual=False))


def test_a_leaving_waiter_that_wakes_past_one_woken_is_found() -> None:
    config = replace(ScenarioConfig(WakeFirstNotDonePool, True), scenario=_deadline_motif())
    result = search(config, DelayBoundedScheduler(1, woken_first=True), max_executions=200, budget_s=60.0)
    assert result.failure is not None
    assert result.failure.violation.invariant == "crash"
    assert "empty deque" in str(result.failure.violation)


def test_a_pool_that_wakes_the_first_in_line_and_ours_come_through() -> None:
    for factory in (WakeFirstPool, kvstress.AsyncBlockPool):
        config = replace(ScenarioConfig(factory, True), scenario=_deadline_motif())
        for scheduler in (DelayBoundedScheduler(1, woken_first=True), RandomScheduler(seed=3)):
            result = search(config, scheduler, max_executions=300, budget_s=60.0)
            assert result.failure is None, (factory, result.failure and result.failure.violation)
