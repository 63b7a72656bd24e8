"""Timer firing under the random strategy: a poller may wake inside another thread's window,
the timing checks do not blame the threads left waiting for it, and such runs replay."""

from __future__ import annotations

import pytest

from kvstress.explorer._strategies import STRATEGIES, make_scheduler
from kvstress.mutants import (
    CondvarPool,
    DeferredResetThreadPool,
    HousekeepingThreadPool,
    MakerThreadPool,
    PollingCasPool,
    PollingResetAfterOfferPool,
    ShardedPool,
)
from kvstress.scenarios import ScenarioConfig, replay, search
from kvstress.schedulers import (
    ALL_TIMERS,
    SLEEPERS,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Schedule,
)
from tests.pools.timer_threads import SpinBesideTickerPool, TimerBatchPool, TimerBatchUnlockedSwapPool


def test_a_schedule_says_which_timers_its_run_fired() -> None:
    """Flags bit 1 for sleepers (``SLEEPERS``, recorded before every timer could fire early), bits
    1 and 2 for ``ALL_TIMERS``; a schedule without either (recorded before timer firing) decodes
    as 0, and each replays with the timers it was recorded with."""
    sleepers = Schedule("random", 7, (0, 1, -1, 2), timers=True)
    assert Schedule.decode(sleepers.encode()) == sleepers
    assert Schedule.decode(sleepers.encode()).timers == SLEEPERS
    every = Schedule("random", 7, (0, 1, -1, 2), timers=ALL_TIMERS)
    assert Schedule.decode(every.encode()).timers == ALL_TIMERS
    plain = Schedule("random", 7, (0, 1, -1, 2))
    assert Schedule.decode(plain.encode()).timers == 0
    assert len({sleepers.encode(), every.encode(), plain.encode()}) == 3
    assert [ReplayScheduler(s).fires_timers for s in (plain, sleepers, every)] == [0, SLEEPERS, ALL_TIMERS]
    with pytest.raises(ValueError, match="timers"):
        Schedule("random", 7, (), timers=3)


def test_a_schedule_says_whether_its_loop_timers_could_fire_late() -> None:
    """Flags bit 3 for ``late`` (an explored test's schedule), beside any timer level; a schedule
    recorded before it decodes with ``late`` False and replays without late jumps. Only the
    explored tests' strategies ask for it: a pool's fuzzing checks timeouts for lateness."""
    for timers in (0, SLEEPERS, ALL_TIMERS):
        late = Schedule("pct", 7, (0, 1 << 20, -1, 2), timers=timers, late=True)
        assert Schedule.decode(late.encode()) == late
        plain = Schedule("pct", 7, (0, 1 << 20, -1, 2), timers=timers)
        assert Schedule.decode(plain.encode()).late is False
        assert [ReplayScheduler(s).late_timers for s in (plain, late)] == [False, True]
    with pytest.raises(ValueError, match="late"):
        Schedule("random", 7, (), late=1)  # type: ignore[arg-type]
    assert not RandomScheduler(seed=1).late_timers and not PCTScheduler(seed=1).late_timers
    for strategy in STRATEGIES:
        scheduler = make_scheduler(strategy, 1)
        assert scheduler.new_execution() and scheduler.schedule().late is True


def test_only_the_random_strategy_fires_timers() -> None:
    assert RandomScheduler(seed=1).fires_timers == ALL_TIMERS and not PCTScheduler(seed=1).fires_timers
    scheduler = RandomScheduler(seed=1)
    assert scheduler.new_execution() and scheduler.schedule().timers == ALL_TIMERS


@pytest.mark.parametrize(
    "factory",
    [
        PollingCasPool,
        ShardedPool,
        CondvarPool,
        TimerBatchPool,
        HousekeepingThreadPool,
        MakerThreadPool,
        DeferredResetThreadPool,
    ],
    ids=lambda f: f.__name__,
)
def test_correct_pools_stay_clean_when_timers_fire(factory: type) -> None:
    """Correct polling, striped and condition-variable pools, and pools with threads of their
    own that wait on time (a timer batching resets, a housekeeper, a maker that retires, a
    deferred reset): jumps for timers are credited to the threads left runnable or blocked, so
    no timing check fires (a soak once raised timeout-late on PollingCasPool, before blocked
    threads were credited too)."""
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


def test_a_timer_thread_of_the_pool_fires_inside_a_release_and_replays() -> None:
    """A daemon ``threading.Timer`` that batches resets takes the pending list without the lock:
    the bug needs the timer's wait (an Event's, in a daemon the pool started) to come due while
    a releaser is between its append and its check of the armed flag. Such a timed wait fires
    ahead of the runnable threads as a sleeper's does (before, never: 0 of 4 seeds in 10 s)."""
    config = ScenarioConfig(TimerBatchUnlockedSwapPool, False)
    for seed in (1, 2):
        result = search(config, RandomScheduler(seed=seed), budget_s=20.0, shrink=False)
        assert result.failure is not None
        assert result.failure.violation.invariant in TimerBatchUnlockedSwapPool.expected
        again = replay(config, Schedule.decode(str(result.failure.schedule)))
        assert again is not None and again.violation.invariant == result.failure.violation.invariant


@pytest.mark.parametrize("make", [RandomScheduler, PCTScheduler], ids=["random", "pct"])
def test_a_spin_beside_a_ticking_daemon_is_still_caught(make: type) -> None:
    """A housekeeping daemon that wakes every millisecond, beside an acquire that spins: early
    firing stops once a thread has run ``EARLY_FIRE_STEPS`` scheduling points at one instant, so
    the ticks cannot carry the spinner past its deadline (random found nothing in 15 s before)."""
    for seed in (1, 2):
        config = ScenarioConfig(SpinBesideTickerPool, False)
        result = search(config, make(seed=seed), budget_s=20.0, shrink=False)
        assert result.failure is not None
        assert result.failure.violation.invariant == "busy-wait", result.failure.describe()
