"""The motif of one block back at the instant a waiter arrives, the waiter then waiting long: a
release that reads the waiter count apart from its own change misses the waiter registering in
between (glibc 12674). Every block back, as the older arrival motif gives them, hides it: the
second release wakes the waiter."""

from __future__ import annotations

from dataclasses import replace

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import motifs
from kvstress.schedulers import DelayBoundedScheduler
from tests.delay_rounds import found_in_first_delay_rounds
from tests.pools.waiter_count import PostReadsWaitersAfterPool, PostReadsWaitersFirstPool


def _arrival_of_one(blocks: int) -> object:
    (found,) = [
        m
        for m in motifs(blocks, False)
        if [len(p) for p in m.programs] == [blocks + 2, 2] and m.programs[1][-1] == ("acquire", 1.0)
    ]
    return found


def test_a_waiter_count_read_before_the_increment_is_a_lost_wakeup_on_the_motif() -> None:
    config = replace(ScenarioConfig(PostReadsWaitersFirstPool, False), scenario=_arrival_of_one(2))
    result = search(config, DelayBoundedScheduler(1, woken_first=True), max_executions=300, budget_s=60.0)
    assert result.failure is not None
    assert result.failure.violation.invariant == "lost-wakeup"


def test_the_same_semaphore_reading_its_count_with_the_increment_comes_through() -> None:
    """Every interleaving with one delay, and the first 300 with two."""
    config = replace(ScenarioConfig(PostReadsWaitersAfterPool, False), scenario=_arrival_of_one(2))
    one = DelayBoundedScheduler(1, woken_first=True)
    result = search(config, one, max_executions=2_000, budget_s=120.0)
    assert result.failure is None, result.failure.violation
    assert one.exhausted
    result = search(config, DelayBoundedScheduler(2, woken_first=True), max_executions=300, budget_s=120.0)
    assert result.failure is None, result.failure.violation


def test_the_fuzz_mix_finds_it_in_its_first_delay_rounds() -> None:
    """About 500 executions into the delay strategy, 3 s on the 2-core machine (``delay_rounds``)."""
    finding = found_in_first_delay_rounds("tests.pools.waiter_count:PostReadsWaitersFirstPool")
    assert finding is not None
    assert finding.violation.invariant == "lost-wakeup"
