"""shadow(): planted dirty and shared blocks diverge and are blamed; correct pools stay silent."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

import pytest

import kvstress
from kvstress.mutants import (
    CheckThenPollPool,
    CondvarPool,
    LateZeroTestPool,
    LockLeakPool,
    PollingCasPool,
    PreferredBlockPool,
    ResetAfterOfferPool,
    RetainLostUpdatePool,
)
from kvstress.mutants._block import Block
from kvstress.shadow import TOLERANCE, ShadowResult, shadow
from kvstress.shadow._plan import MAX_DEPTH, MAX_FORKS, ForkPlan, blocks_for, draw_plan


class CountingPool(CondvarPool):
    """CondvarPool that counts retains (prefix sharing by forks)."""

    retains: ClassVar[list[int]] = []

    def retain(self, block: Any) -> None:
        CountingPool.retains.append(block.id)
        super().retain(block)


class OverlapPool(PollingCasPool):
    """PollingCasPool (no pool-wide lock) that counts the pairs of calls on one block that ran
    at once, at least one of them a release, keyed by their names ("release+retain")."""

    overlaps: ClassVar[dict[str, int]] = {}
    _running: ClassVar[dict[int, list[str]]] = {}

    def _enter(self, op: str, block: Block) -> None:
        running = OverlapPool._running.setdefault(block.id, [])
        for other in running:
            if "release" in (op, other):
                key = "+".join(sorted((op, other)))
                OverlapPool.overlaps[key] = OverlapPool.overlaps.get(key, 0) + 1
        running.append(op)

    def retain(self, block: Block) -> None:
        self._enter("retain", block)
        try:
            super().retain(block)
        finally:
            OverlapPool._running[block.id].remove("retain")

    def release(self, block: Block) -> bool:
        self._enter("release", block)
        try:
            return super().release(block)
        finally:
            OverlapPool._running[block.id].remove("release")


class LeakyPool(CondvarPool):
    """Planted leak: the last release of block 0 forgets to queue it (nothing drifts)."""

    def _offer(self, block: Block) -> None:
        if block.id != 0:
            super()._offer(block)


def test_reset_after_offer_diverges_and_the_wiped_block_is_named() -> None:
    """The reset landing after the offer wipes the next tenant's K/V: drift, blamed on that block."""
    result = shadow(ResetAfterOfferPool, seed=0, max_seeds=1)
    d = result.divergence
    assert d is not None and result.failure is None and not result.clean
    assert d.max_abs_diff > TOLERANCE and d.seed == 0 and d.strategy in ("random", "pct")
    assert d.schedule is not None and d.schedule.startswith("ks1:")
    assert d.block is not None
    assert d.block.position < d.position and d.block.kind in ("K", "V")
    assert d.block.max_abs_diff > 0 and d.block.state == "IN_USE" and (d.block.refcount or 0) >= 1


def test_a_divergence_replays_from_its_seed() -> None:
    """Running the diverging seed alone reproduces the same divergence, field for field."""
    first = shadow(ResetAfterOfferPool, seed=0, max_seeds=3).divergence
    assert first is not None
    again = shadow(ResetAfterOfferPool, seed=first.seed, max_seeds=1).divergence
    assert again == first


def test_a_block_handed_out_twice_diverges_with_refcount_above_one() -> None:
    """PreferredBlockPool pins a held block for a second tenant: the first tenant's K/V is overwritten.
    (The first of several seeds, not one: which seed lines the race up moves whenever the
    scheduling points do, and some seeds end in the pool's own error first.)"""
    runs = (shadow(PreferredBlockPool, seed=seed, max_seeds=1).divergence for seed in range(30))
    d = next((found for found in runs if found is not None and found.block is not None), None)
    assert d is not None and d.block is not None
    assert d.block.refcount is not None and d.block.refcount >= 2


def test_preferred_block_is_caught_on_the_first_seed_too() -> None:
    """Where the double pin trips mark_in_use first, it is reported as a crash, not silence."""
    result = shadow(PreferredBlockPool, seed=0, max_seeds=1)
    assert result.failure is not None and result.failure.invariant == "crash"
    assert "mark_in_use" in result.failure.message


@pytest.mark.parametrize(
    "factory", [kvstress.ThreadedBlockPool, CondvarPool, PollingCasPool, kvstress.TieredBlockPool]
)
def test_correct_pools_stay_silent(factory: Any) -> None:
    """Correct pools of four designs: every step compared, no divergence, noise far below the bound."""
    result = shadow(factory, seed=100, max_seeds=5)
    assert result.clean, (result.divergence, result.failure)
    assert (result.seeds, result.executions) == (5, 10)
    assert result.steps_compared > 100
    assert 0 <= result.max_abs_diff < TOLERANCE / 100


def test_free_running_mode_stays_silent_on_a_correct_pool() -> None:
    """Real threads, same comparison: a correct pool is clean."""
    result = shadow(CondvarPool, seed=7, max_seeds=2, mode="free")
    assert result.clean and result.mode == "free" and result.executions == 2 and result.steps_compared > 0


def test_forks_share_prefix_blocks_through_retain() -> None:
    """With forks a child retains its parent's full blocks; without, nobody retains."""
    CountingPool.retains.clear()
    assert shadow(CountingPool, seed=1, max_seeds=2).clean
    assert CountingPool.retains
    CountingPool.retains.clear()
    assert shadow(CountingPool, seed=1, max_seeds=2, forks=False).clean
    assert not CountingPool.retains


def test_a_pool_that_raises_is_a_crash_not_a_divergence() -> None:
    """CheckThenPollPool's IndexError surfaces as a crash failure naming the call."""
    failure = shadow(CheckThenPollPool, seed=0, max_seeds=3).failure
    assert failure is not None and failure.invariant == "crash" and "IndexError" in failure.message


def test_a_pool_that_stops_answering_is_a_failure() -> None:
    """LockLeakPool leaves its lock held: the run ends with a hang or the lock's own error."""
    failure = shadow(LockLeakPool, seed=1, max_seeds=1).failure
    assert failure is not None and failure.invariant in ("hang", "crash")


def test_budget_stops_between_executions_but_runs_one_seed() -> None:
    """A budget smaller than one execution still runs the first seed, then stops."""
    result = shadow(CondvarPool, seed=3, budget_s=1e-6)
    assert result.seeds == 1 and result.clean


def test_async_pools_are_refused() -> None:
    """Shadow mode drives threads: an async pool is a ValueError saying so."""
    with pytest.raises(ValueError, match="thread-flavoured pool"):
        shadow(kvstress.AsyncBlockPool)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sequences": 0}, r"sequences must be an int >= 1, got 0 \(int\)"),
        ({"num_blocks": 3}, r"num_blocks must be >= 4 .* got 3"),
        ({"mode": "fast"}, r"mode must be one of controlled, free, got 'fast' \(str\)"),
        ({"seed": -1}, r"seed must be an int in \[0, 2\*\*63\), got -1 \(int\)"),
        ({"budget_s": 0}, r"budget_s must be a finite number > 0, got 0 \(int\)"),
        ({"card": "no-such-model"}, r"known model"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict[str, Any], message: str) -> None:
    """Each bad argument is a ValueError naming it, what was expected and what came."""
    with pytest.raises(ValueError, match=message):
        shadow(CondvarPool, **kwargs)


def test_the_result_is_frozen_and_json_ready() -> None:
    """A ShadowResult cannot change and round-trips through json with its schema."""
    result = shadow(ResetAfterOfferPool, seed=0, max_seeds=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.seeds = 2  # type: ignore[misc]
    data = json.loads(json.dumps(result.to_dict()))
    assert data["schema"] == "kvstress.shadow/1" and data["divergence"]["block"]["block_id"] >= 0
    assert isinstance(result, ShadowResult) and data["pool"] == "ResetAfterOfferPool"


def test_plans_are_seeded_staggered_and_bounded() -> None:
    """The same seed draws the same plans; lengths differ and none outgrows block_tokens + steps."""
    plans = draw_plan(5, sequences=6, steps=12, block_tokens=4, vocab=64, forks=True)
    assert plans == draw_plan(5, sequences=6, steps=12, block_tokens=4, vocab=64, forks=True)
    assert len({plan.length for plan in plans}) > 1
    for plan in plans:
        assert 1 <= len(plan.prompt) <= 4 and plan.length <= 16
    assert blocks_for(16, 4) == 4 and blocks_for(17, 4) == 5


def _check_forks(forks: tuple[ForkPlan, ...], first: int, last: int, depth: int) -> int:
    """Assert each fork lies in its parent's reach and within bounds; return how many there are."""
    count = 0
    for fork in forks:
        assert first <= fork.at <= last and fork.decode >= 1 and fork.length <= 16 and depth <= MAX_DEPTH
        count += 1 + _check_forks(fork.forks, fork.at + 1, fork.length, depth + 1)
    return count


def test_fork_trees_are_bounded_and_share_in_every_way() -> None:
    """Over 40 seeds: trees stay bounded, the oldest root always forks, and every racy shape occurs."""
    shapes = {"several": 0, "siblings": 0, "at end": 0, "grandchild": 0}
    for seed in range(40):
        plans = draw_plan(seed, sequences=4, steps=12, block_tokens=4, vocab=64, forks=True)
        assert plans[0].forks, seed
        for plan in plans:
            count = _check_forks(plan.forks, 4, plan.length, 1)
            assert count == len(list(plan.descendants())) <= MAX_FORKS
            assert plan.tokens == plan.length + sum(fork.decode for fork in plan.descendants())
            ats = [fork.at for fork in plan.forks]
            shapes["several"] += len(ats) > 1
            shapes["siblings"] += len(set(ats)) < len(ats)
            shapes["at end"] += plan.length in ats
            shapes["grandchild"] += any(fork.forks for fork in plan.forks)
        assert not any(
            p.forks for p in draw_plan(seed, sequences=4, steps=12, block_tokens=4, vocab=64, forks=False)
        )
    assert min(shapes.values()) >= 10, shapes


def test_shared_blocks_are_released_concurrently() -> None:
    """The workload makes holders release one shared block at once, and retain it during a release."""
    OverlapPool.overlaps.clear()
    OverlapPool._running.clear()
    assert shadow(OverlapPool, seed=0, max_seeds=8).clean
    assert OverlapPool.overlaps.get("release+release", 0) >= 5, OverlapPool.overlaps
    assert OverlapPool.overlaps.get("release+retain", 0) >= 1, OverlapPool.overlaps


def test_retain_lost_update_is_caught_as_a_lost_block_and_replays() -> None:
    """RetainLostUpdatePool: a release undone by a stale retain leaks a block; the audit names it."""
    result = shadow(RetainLostUpdatePool, seed=0, max_seeds=1)
    failure = result.failure
    assert failure is not None and failure.invariant == "lost-block" and failure.seed == 0
    assert "handed out only 3 of its 4 blocks" in failure.message
    assert shadow(RetainLostUpdatePool, seed=0, max_seeds=1).failure == failure


def test_late_zero_test_is_caught() -> None:
    """LateZeroTestPool: two sharers releasing together both return the block; its id is queued twice."""
    failure = shadow(LateZeroTestPool, seed=30, max_seeds=10).failure  # seeds 32, 33, 37, 39 find it
    assert failure is not None and failure.invariant == "crash" and "free queue corrupt" in failure.message


def test_a_leaked_block_is_a_lost_block_failure_not_silence() -> None:
    """A pool that never queues block 0 again drifts nothing, but the audit after the run reports it."""
    failure = shadow(LeakyPool, seed=0, max_seeds=1).failure
    assert failure is not None and failure.invariant == "lost-block"
    assert "after every sequence released its blocks" in failure.message
