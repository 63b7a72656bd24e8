"""How the harness cancels an async pool follows the pool's code, not its module's imports; and
what the event loop caught in a callback is named in the report of what it caused.

A pool whose code uses anyio or trio is cancelled by anyio cancel scopes, as its callers do; a
pool written on asyncio alone by one ``Task.cancel()``, even in a module that imports anyio for
something else, or in the module of an anyio pool (a blind sweep's pool was missed that way).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
from pools.handoff_asyncio import HandoffDropsPool, HandoffPool

from kvstress.fuzz import fuzz, load_target, parse_mix
from kvstress.harness._scenarios import speaks_anyio
from kvstress.mutants import (
    AsyncioConditionPool,
    AsyncPollingPool,
    BackgroundTaskPool,
    DeferredResetTaskPool,
)
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import RandomScheduler


class HoldsAnyioPrimitive(AsyncioConditionPool):
    """Its code names no anyio, but a factory hands it an anyio primitive it waits on."""

    def __init__(self, *args: Any, limiter: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limiter = limiter


def test_the_code_decides_not_the_imports() -> None:
    """Asyncio pools in a module that imports anyio (the corpus's background and deferred-reset
    task pools share a module with an anyio polling pool) are asyncio pools; the polling pool,
    whose code calls anyio, and a pool holding an anyio primitive, are anyio pools."""
    assert not speaks_anyio(HandoffPool(2, 4))
    assert not speaks_anyio(BackgroundTaskPool(2, 4)) and not speaks_anyio(DeferredResetTaskPool(2, 4))
    assert speaks_anyio(AsyncPollingPool(2, 4))
    assert speaks_anyio(HoldsAnyioPrimitive(2, 4, limiter=anyio.CapacityLimiter(1)))
    assert not speaks_anyio(HoldsAnyioPrimitive(2, 4))


def _fuzz(cls: type, tmp_path: Path, budget_s: float) -> Any:
    target = load_target(f"{cls.__module__}:{cls.__qualname__}", backend="asyncio")
    return fuzz(target, budget_s=budget_s, seed=0, mix=parse_mix("auto"), report_dir=tmp_path)


def test_a_block_dropped_by_a_waiter_cancelled_after_its_hand_off_is_found(tmp_path: Path) -> None:
    """The hand-off pool that drops the block of a waiter cancelled before it ran: found by a
    plain ``Task.cancel()`` landing between the hand-off and the waiter's next step (it was
    missed while its module's ``import anyio`` made it an anyio pool)."""
    outcome = _fuzz(HandoffDropsPool, tmp_path, 20.0)
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant in ("lost-block", "lost-wakeup")


def test_the_hand_off_pool_that_passes_the_block_on_is_clean(tmp_path: Path) -> None:
    outcome = _fuzz(HandoffPool, tmp_path, 5.0)
    assert outcome.finding is None, outcome.finding.violation.details()


class OfferDiesInCallbackPool(AsyncioConditionPool):
    """release hands the offer to a loop callback, which raises before it queues the block (a
    done-callback that meets a future already cancelled): the block is lost."""

    async def release(self, block: Any) -> bool:
        if not self._last_reference(block):
            return False
        self._reset(block)
        asyncio.get_running_loop().call_soon(self._offer_later, block)
        return True

    def _offer_later(self, block: Any) -> None:
        raise RuntimeError("the reset stream is closed")


def test_a_block_lost_in_a_loop_callback_names_what_the_callback_raised() -> None:
    """The event loop catches a callback's exception and goes on; the report of the block lost
    that way names it, where it said only that the block had leaked."""
    config = ScenarioConfig(OfferDiesInCallbackPool, True)
    result = search(config, RandomScheduler(seed=1), max_executions=50, shrink=False)
    assert result.failure is not None
    assert "the event loop caught in a callback: RuntimeError: the reset stream is closed" in (
        result.failure.violation.message
    )


def test_a_failure_with_no_callback_error_says_nothing_of_one() -> None:
    result = search(
        ScenarioConfig(HandoffDropsPool, True), RandomScheduler(seed=1), max_executions=300, shrink=False
    )
    assert result.failure is not None and "event loop caught" not in result.failure.violation.message


def test_free_running_stress_names_what_a_loop_callback_raised_too() -> None:
    """On a real asyncio loop as on the controlled one: the report of the block lost in the
    callback names the callback's exception."""
    from kvstress.scenarios._stress import run_stress_execution

    record = run_stress_execution(ScenarioConfig(OfferDiesInCallbackPool, True), seed=1)
    assert record.failure is not None
    assert "the event loop caught in a callback: RuntimeError: the reset stream is closed" in (
        record.failure.message
    )
