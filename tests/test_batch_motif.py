"""The motif of two batch waiters for every block, at an exhausted pool given back one block at
a time: a hold-and-wait ``acquire_many`` deadlocks there; an all-at-once one never does."""

from __future__ import annotations

from dataclasses import replace

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import motifs
from kvstress.schedulers import DelayBoundedScheduler, RandomScheduler
from tests.pools.hold_and_wait import HoldAndWaitPool, TakeAllAtOncePool


def _motif(blocks: int) -> object:
    with_batches = motifs(blocks, False, batch=True)
    assert len(with_batches) == len(motifs(blocks, False)) + 1
    return with_batches[-1]


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
