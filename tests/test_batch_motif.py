"""The motif of two batch waiters for every block, at an exhausted pool given back one block at
a time: a hold-and-wait ``acquire_many`` deadlocks there; an all-at-once one never does."""

from __future__ import annotations

from dataclasses import replace

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import motifs
from kvstress.schedulers import DelayBoundedScheduler, RandomScheduler
from tests.pools.fifo_weighted import FifoWeightedFrontLeavesPool, FifoWeightedPool
from tests.pools.hold_and_wait import HoldAndWaitPool, TakeAllAtOncePool


def _motif(blocks: int) -> object:
    with_batches = motifs(blocks, False, batch=True)
    assert len(with_batches) == len(motifs(blocks, False)) + 2  # and a batch ahead of a single
    (found,) = [m for m in with_batches if f"acquire_many({blocks}, None)" in m.describe()]
    return found


def test_the_batch_motif_is_run_only_for_pools_with_acquire_many_and_on_virtual_time() -> None:
    assert not any("acquire_many" in m.describe() for m in motifs(2, False))
    assert not any("acquire_many" in m.describe() for m in motifs(2, False, batch=True, virtual=False))
    assert "acquire_many(2, None)" in _motif(2).describe()  # type: ignore[attr-defined]
    assert not any("acquire_many" in m.describe() for m in motifs(9, False, batch=True))


def test_two_batch_waiters_deadlock_a_hold_and_wait_pool() -> None:
    for blocks in (2, 3):
        config = replace(ScenarioConfig(HoldAndWaitPool, False, num_blocks=blocks), scenario=_motif(blocks))
        result = search(config, DelayBoundedScheduler(1, woken_first=True), max_executions=200, budget_s=60.0)
        assert result.failure is not None, blocks
        assert result.failure.violation.invariant == "hang"
        assert "deadlock" in str(result.failure.violation)


def test_an_all_at_once_pool_and_ours_come_through_the_batch_motif() -> None:
    import kvstress

    for factory in (TakeAllAtOncePool, kvstress.ThreadedBlockPool):
        config = replace(ScenarioConfig(factory, False), scenario=_motif(2))
        for scheduler in (DelayBoundedScheduler(2, woken_first=True), RandomScheduler(seed=3)):
            result = search(config, scheduler, max_executions=300, budget_s=60.0)
            assert result.failure is None, (factory, result.failure and result.failure.violation)


def _batch_ahead(blocks: int) -> object:
    (found,) = [
        m for m in motifs(blocks, False, batch=True) if f"acquire_many({blocks}, {0.002:g})" in m.describe()
    ]
    return found


def test_a_front_batch_waiter_that_leaves_without_waking_the_one_behind_is_found() -> None:
    """golang/go#37852, rebuilt blind: found at 18.8 s on two seeds of three before the motif."""
    for blocks in (2, 3):
        base = ScenarioConfig(FifoWeightedFrontLeavesPool, False, num_blocks=blocks)
        config = replace(base, scenario=_batch_ahead(blocks))
        result = search(config, DelayBoundedScheduler(1, woken_first=True), max_executions=50, budget_s=60.0)
        assert result.failure is not None, blocks
        assert result.failure.violation.invariant == "lost-wakeup"


def test_a_fifo_pool_whose_departing_front_wakes_the_rest_and_ours_come_through() -> None:
    import kvstress

    for factory in (FifoWeightedPool, kvstress.ThreadedBlockPool):
        config = replace(ScenarioConfig(factory, False), scenario=_batch_ahead(2))
        scheduler = DelayBoundedScheduler(1, woken_first=True)
        result = search(config, scheduler, max_executions=1_000, budget_s=120.0)
        assert result.failure is None, (factory, result.failure.violation)
        assert scheduler.exhausted
