"""Clocks and lock factories a pool binds before any run: a default argument
(``clock=time.monotonic``, as cachetools' ``TTLCache(timer=...)`` takes one) and a class attribute
(``_clock = time.monotonic``, also as a ``staticmethod``). Under the controlled strategies they
are the cooperative ones, as the module's own names are. Before, they stayed on real time while
the pool's waits ran on virtual time: a correct pool was a ``hang`` or ``timeout-late`` at once
(PCT and random, every seed). The async twin is in ``test_wall_clock_deadlines``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kvstress.mutants import ThreadConditionPool
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler


class DefaultClockThreadPool(ThreadConditionPool):
    """Correct: a deadline loop on a clock passed in, defaulting to ``time.monotonic``, and a
    condition from a lock factory passed in the same way."""

    def __init__(
        self,
        *args: Any,
        clock: Callable[[], float] = time.monotonic,
        lock_factory: Any = threading.Lock,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._now = clock
        self._cond = threading.Condition(lock_factory())

    def acquire(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else self._now() + timeout
        with self._cond:
            while not self._free:
                if deadline is None:
                    self._cond.wait()
                    continue
                remaining = deadline - self._now()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._taken(self._free.popleft())


class AttributeClockThreadPool(DefaultClockThreadPool):
    """The same, with the clock a class attribute."""

    _clock = time.monotonic
    _static_clock = staticmethod(time.perf_counter)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._now = self._clock if len(self._free) % 2 else self._static_clock


@pytest.mark.parametrize("pool", [DefaultClockThreadPool, AttributeClockThreadPool])
def test_a_clock_bound_before_the_run_is_the_controlled_one(pool: type) -> None:
    config = ScenarioConfig(pool, False)
    for scheduler in (PCTScheduler(seed=1), RandomScheduler(seed=1)):
        result = search(config, scheduler, max_executions=100, shrink=False)
        assert result.failure is None, result.failure.describe()


def test_the_bound_clocks_are_the_real_ones_again_after_a_run() -> None:
    config = ScenarioConfig(AttributeClockThreadPool, False)
    search(config, RandomScheduler(seed=2), max_executions=3, shrink=False)
    assert DefaultClockThreadPool.__init__.__kwdefaults__ == {
        "clock": time.monotonic,
        "lock_factory": threading.Lock,
    }
    assert vars(AttributeClockThreadPool)["_clock"] is time.monotonic
    assert vars(AttributeClockThreadPool)["_static_clock"].__func__ is time.perf_counter
