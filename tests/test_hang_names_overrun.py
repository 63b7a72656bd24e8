"""A run stopped at its time limit names the acquires still in flight past their timeouts: the
generic message ("a thread keeps waiting or polling long past every timeout") cannot say which
call overran, and a try-once that never returned is the likeliest bug."""

from __future__ import annotations

import time
from dataclasses import replace

from kvstress._violation import Operation
from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._execution import past_their_timeouts
from kvstress.scenarios._programs import Scenario
from kvstress.schedulers import RandomScheduler
from tests.pools._simple import Block, SimpleThreadedPool


def _op(
    index: int, worker: str, timeout: object, start: float, end: float | None, outcome: str, result: object
) -> Operation:
    return Operation(index, worker, "acquire", {"timeout": timeout}, start, end, outcome, result)


def test_only_the_acquires_stopped_past_their_timeouts_are_named_a_try_once_first() -> None:
    history = [
        _op(0, "b0", 0.05, 0.0, 0.05, "info", None),  # timed out, returned: kept its timeout
        _op(1, "b1", 0.5, 0.0, 8.0, "info", "cancelled"),  # stopped at the limit, past 0.5 s
        _op(2, "b2", 0.0, 0.01, 8.0, "info", "cancelled"),  # a try-once stopped at the limit
        _op(3, "b0", 0.5, 0.1, 0.2, "info", "cancelled"),  # the scenario's own cancel, in time
        _op(4, "b1", None, 0.0, 8.0, "info", "cancelled"),  # no limit: nothing to overrun
    ]
    note = past_their_timeouts(history)
    assert note == (
        "\nStill in flight past its timeout when the run was stopped: b2's acquire(timeout=0) "
        "from 0.01 s, b1's acquire(timeout=0.5) from 0 s."
    )
    assert past_their_timeouts(history[:1] + history[3:]) == ""


class TryOnceWaitsForEverPool(SimpleThreadedPool):
    """BUG: ``if not timeout`` sends a try-once into the wait without limit (it polls)."""

    def acquire(self, timeout: float | None = None) -> Block | None:
        while True:
            with self._lock:
                if self._free:
                    return self._take()
            if timeout:  # a finite, positive timeout is kept; 0 and None wait for ever
                return None
            time.sleep(0.05)


def test_a_hang_at_the_time_limit_names_the_try_once() -> None:
    scenario = Scenario(((("acquire", 0.0), ("acquire", 0.0)), (("sleep", 0.01), ("acquire", 0.0))))
    config = replace(ScenarioConfig(TryOnceWaitsForEverPool, False), scenario=scenario)
    result = search(config, RandomScheduler(seed=0), max_executions=5, budget_s=60.0)
    assert result.failure is not None
    violation = result.failure.violation
    assert violation.invariant == "hang"
    assert "past its timeout when the run was stopped: " in violation.message
    assert "acquire(timeout=0) from 0" in violation.message
