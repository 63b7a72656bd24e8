"""A release of a shared block cancelled while it waits for the pool's lock, as another sharer's
release of the same block runs: the pool keeps the cancelled holder's reference (it changed
nothing), and the harness must see that, though the refcount fell meanwhile (the other sharer's
reference). Before, it compared the refcount with its value when the cancelled release began,
took the fall for this release's effect, dropped the holder's reference, and reported the block
lost (anyio and trio, every seed); and the linearizability model, told only "cancelled", let the
block be free after it and blamed a try-once None."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from kvstress.mutants import AnyioSemaphorePool, AsyncioSemaphorePool
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler


class LockedReleasePool(AnyioSemaphorePool):
    """Correct: a release takes an ``anyio.Lock`` before it changes anything (the checkpoint
    of a contended ``async with`` is where a cancellation lands), and never awaits after."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = anyio.Lock()

    async def release(self, block: Any) -> bool:
        async with self._lock:
            if not self._last_reference(block):
                return False
            self._reset(block)
            self._free.append(block)
        self._units.release()
        return True


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_cancelled_release_beside_a_sharers_release_keeps_its_reference(backend: str) -> None:
    config = ScenarioConfig(LockedReleasePool, True, backend=backend)
    for scheduler in (PCTScheduler(seed=0), RandomScheduler(seed=0), PCTScheduler(seed=2)):
        result = search(config, scheduler, max_executions=200, shrink=False)
        assert result.failure is None, result.failure.describe()


class WaitsOutItsShieldPool(AsyncioSemaphorePool):
    """Correct: the whole release runs shielded, in a task of its own, and a cancelled caller
    waits it out before the cancellation goes on, so the release has taken effect when the
    call ends either way. Sharers' releases overlap: the cancelled one may be the one the pool
    takes last, and its True is lost with it."""

    async def release(self, block: Any) -> bool:
        inner = asyncio.ensure_future(super().release(block))
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            await inner
            raise


def test_a_cancelled_release_the_pool_took_last_is_the_missing_true() -> None:
    """The harness credited a cancelled release with the True it may have answered only when it
    was the last release *called*: one called earlier, which the pool took after a later
    sharer's False, left the tenancy with no True, reported as lost-block on every seed (a blind
    user's correct pool)."""
    config = ScenarioConfig(WaitsOutItsShieldPool, True, backend="asyncio")
    for scheduler in (PCTScheduler(seed=0), RandomScheduler(seed=0), RandomScheduler(seed=1)):
        result = search(config, scheduler, max_executions=400, shrink=False)
        assert result.failure is None, result.failure.describe()
