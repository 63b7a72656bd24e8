"""Pools that keep their deadlines on another clock than ``time.monotonic``: the wall clock
(``time.time()``), as much code does, and ``time.clock_gettime`` (a blind sweep's pools, threads
and asyncio). Under control each moves with virtual time. Before, they stood still while the
timeouts ran on virtual time, so a correct pool's wait never reached its deadline: a false
``hang`` or ``timeout-late`` (at once, every seed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from kvstress.mutants import AsyncioConditionPool, CondvarPool
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


class ClockGettimeAsyncPool(WallClockDeadlinePool):
    """Correct: the same, its deadline on ``time.clock_gettime(time.CLOCK_MONOTONIC)``."""

    def _clock(self) -> float:
        return time.clock_gettime(time.CLOCK_MONOTONIC)


class ClockGettimeCondvarPool(CondvarPool):
    """Correct: a Condition pool whose waiter keeps its deadline on
    ``time.clock_gettime_ns(time.CLOCK_MONOTONIC)`` and looks again after every wake-up."""

    def _until_free(self, timeout: float | None) -> bool:
        deadline = (
            None if timeout is None else time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(timeout * 1e9)
        )
        while not self._free:
            left = (
                None if deadline is None else (deadline - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) / 1e9
            )
            if left is not None and left <= 0:
                return False
            self._wait(left)
        return True


@pytest.mark.parametrize("pool", [WallClockDeadlinePool, DefaultClockPool, ClockGettimeAsyncPool])
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


def test_clock_gettime_deadlines_expire_on_the_thread_baton() -> None:
    config = ScenarioConfig(ClockGettimeCondvarPool, False)
    for scheduler in (PCTScheduler(seed=1), RandomScheduler(seed=1)):
        result = search(config, scheduler, max_executions=150, shrink=False)
        assert result.failure is None, result.failure.describe()


def test_clock_gettime_keeps_the_cpu_clocks_real() -> None:
    """Only the monotonic and wall clocks are virtual: a CPU-time clock stays the process's own."""
    from kvstress.controlled._patch import _TIME

    fake = _TIME["clock_gettime"]
    assert fake(time.CLOCK_PROCESS_CPUTIME_ID) == pytest.approx(
        time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID), abs=0.5
    )
    assert abs(fake(time.CLOCK_MONOTONIC) - time.monotonic()) < 1.0  # off a controlled thread: real
