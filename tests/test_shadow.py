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
    LockLeakPool,
    PollingCasPool,
    PreferredBlockPool,
    ResetAfterOfferPool,
)
from kvstress.shadow import TOLERANCE, ShadowResult, shadow
from kvstress.shadow._plan import blocks_for, draw_plan


class CountingPool(CondvarPool):
    """CondvarPool that counts retains (prefix sharing by forks)."""

    retains: ClassVar[list[int]] = []

    def retain(self, block: Any) -> None:
        CountingPool.retains.append(block.id)
        super().retain(block)


def test_reset_after_offer_diverges_and_the_wiped_block_is_named() -> None:
    """The reset landing after the offer wipes the next tenant's K/V: drift, blamed on that block."""
    result = shadow(ResetAfterOfferPool, seed=0, max_seeds=1)
    d = result.divergence
    assert d is not None and result.failure is None and not result.clean
    assert d.max_abs_diff > TOLERANCE and d.seed == 0 and d.strategy in ("random", "pct")
    assert d.schedule is not None and d.schedule.startswith("ks1:")
    assert d.block is not None
    assert d.block.position < d.position and d.block.kind in ("K", "V")
    assert d.block.max_abs_diff > 0 and (d.block.state, d.block.refcount) == ("IN_USE", 1)


def test_a_divergence_replays_from_its_seed() -> None:
    """Running the diverging seed alone reproduces the same divergence, field for field."""
    first = shadow(ResetAfterOfferPool, seed=0, max_seeds=3).divergence
    assert first is not None
    again = shadow(ResetAfterOfferPool, seed=first.seed, max_seeds=1).divergence
    assert again == first


def test_a_block_handed_out_twice_diverges_with_refcount_above_one() -> None:
    """PreferredBlockPool pins a held block for a second tenant: the first tenant's K/V is overwritten."""
    d = shadow(PreferredBlockPool, seed=4, max_seeds=1).divergence
    assert d is not None and d.block is not None
    assert d.block.refcount is not None and d.block.refcount >= 2


def test_preferred_block_is_caught_on_the_first_seed_too() -> None:
    """Where the double pin trips mark_in_use first, it is reported as a crash, not silence."""
    result = shadow(PreferredBlockPool, seed=0, max_seeds=1)
    assert result.failure is not None and result.failure.invariant == "crash"
    assert "mark_in_use" in result.failure.message


@pytest.mark.parametrize("factory", [kvstress.ThreadedBlockPool, CondvarPool, PollingCasPool])
def test_correct_pools_stay_silent(factory: Any) -> None:
    """Correct pools of three designs: every step compared, no divergence, noise far below the bound."""
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
        if plan.fork_at is not None:
            assert 4 <= plan.fork_at < plan.length and plan.fork_at + plan.fork_decode <= 16
    assert blocks_for(16, 4) == 4 and blocks_for(17, 4) == 5
