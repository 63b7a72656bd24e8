"""Timer firing under the random strategy: a poller may wake inside another thread's window,
the timing checks do not blame the threads left waiting for it, and such runs replay."""

from __future__ import annotations

import pytest

from kvstress.mutants import CondvarPool, PollingCasPool, PollingResetAfterOfferPool, ShardedPool
from kvstress.scenarios import ScenarioConfig, replay, search
from kvstress.schedulers import PCTScheduler, RandomScheduler, ReplayScheduler, Schedule


def test_a_schedule_says_whether_its_run_fired_timers() -> None:
    """Flags bit 1; a schedule without it (recorded before timer firing) decodes as False."""
    fired = Schedule("random", 7, (0, 1, -1, 2), timers=True)
    assert Schedule.decode(fired.encode()) == fired
    plain = Schedule("random", 7, (0, 1, -1, 2))
    assert Schedule.decode(plain.encode()).timers is False
    assert fired.encode() != plain.encode()
    assert ReplayScheduler(fired).fires_timers and not ReplayScheduler(plain).fires_timers


def test_only_the_random_strategy_fires_timers() -> None:
    assert RandomScheduler(seed=1).fires_timers and not PCTScheduler(seed=1).fires_timers
    scheduler = RandomScheduler(seed=1)
    assert scheduler.new_execution() and scheduler.schedule().timers


@pytest.mark.parametrize("factory", [PollingCasPool, ShardedPool, CondvarPool], ids=lambda f: f.__name__)
def test_correct_pools_stay_clean_when_timers_fire(factory: type) -> None:
    """A correct polling, striped and condition-variable pool: jumps for sleepers are credited to
    the threads left runnable or blocked, so no timing check fires (a soak once raised
    timeout-late on PollingCasPool, before blocked threads were credited too)."""
    for seed in (3, 4):
        result = search(ScenarioConfig(factory, False), RandomScheduler(seed=seed), max_executions=120)
        assert result.failure is None, result.failure.describe()


def test_a_poller_woken_inside_a_releaser_s_window_is_found_and_replays() -> None:
    """Reset after offer on the polling design: the poller must wake between the offer and the
    zeroing. With timers firing, random search finds it on every seed tried; the schedule
    records the firing and replays the same failure."""
    config = ScenarioConfig(PollingResetAfterOfferPool, False)
    for seed in (1, 2):
        result = search(config, RandomScheduler(seed=seed), budget_s=20.0, shrink=False)
        assert result.failure is not None
        assert result.failure.violation.invariant in PollingResetAfterOfferPool.expected
        schedule = Schedule.decode(str(result.failure.schedule))
        assert schedule.timers
        again = replay(config, schedule)
        assert again is not None and again.violation.invariant == result.failure.violation.invariant
