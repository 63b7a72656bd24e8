"""An async pool that keeps its deadlines on the wall clock (``time.time()``), as much code
does: on the controlled loop its ``time.time()`` moves with virtual time. Before, it stood still
there while the loop's timeouts ran on virtual time, so a correct pool's wait never reached its
deadline: a false ``hang`` (PCT, at once, every seed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from kvstress.mutants import AsyncioConditionPool
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler


class WallClockDeadlinePool(AsyncioConditionPool):
    """Correct: waits on the Condition in slices of ``asyncio.timeout``, up to a deadline kept on
    ``time.time()``; a waiter that times out looks again before it gives up."""

    def _clock(self) -> float:
        return time.time()

    async def _acquire(self, timeout: float | None) -> Any:
        deadline = None if timeout is None else self._clock() + timeout
        async with self._cond:
            while not self._free:
                if timeout == 0:
                    return None
                remaining = None if deadline is None else deadline - self._clock()
                if remaining is not None and remaining <= 0:
                    return None
                try:
                    async with asyncio.timeout(remaining):
                        await self._cond.wait()
                except TimeoutError:
                    pass
                except asyncio.CancelledError:
                    if self._free:
                        self._cond.notify()  # pass on a notify this waiter may have taken
                    raise
            return self._taken(self._free.popleft())


class DefaultClockPool(WallClockDeadlinePool):
    """Correct: the same, its deadline on a clock passed in (``clock=time.monotonic``, bound when
    the function was defined; see ``test_bound_clocks``)."""

    def __init__(self, *args: Any, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._now = clock

    def _clock(self) -> float:
        return self._now()


@pytest.mark.parametrize("pool", [WallClockDeadlinePool, DefaultClockPool])
def test_wall_clock_deadlines_expire_with_the_controlled_loop(pool: type) -> None:
    config = ScenarioConfig(pool, True)
    for scheduler in (PCTScheduler(seed=1), RandomScheduler(seed=1)):
        result = search(config, scheduler, max_executions=150, shrink=False)
        assert result.failure is None, result.failure.describe()


def test_the_loop_s_wall_clock_is_the_real_one_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a controlled loop it reads the wall clock afresh, also after the clock was set (NTP
    stepped a CI machine's clock by 11 s during a run)."""
    from kvstress.controlled._patch import _loop_wall_time

    assert abs(_loop_wall_time() - time.time()) < 1.0
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)
    assert abs(_loop_wall_time() - time.time()) < 1.0
