"""The batching example's tests: the loop serves its traffic, and every planted bug hides from
plain pytest-asyncio but not from kvstress_explore with the pool behind kvstress.audit."""

from __future__ import annotations

import functools
import re

import pytest
from buggy import (
    BUGGY,
    DoubleReleaseOnAbort,
    DropsBlockOfPreempted,
    ForgetsBlocksOnTimeout,
    PrefixWithoutRetain,
)
from engine import Engine
from traffic import serve

import kvstress

SERVED = ["6 steps", "6 steps", "timed out", "disconnected", "2 steps", "2 steps", "3 steps", "disconnected"]
SERVED += ["2 steps"]
FOUND_AS = {
    DoubleReleaseOnAbort: "double-release",
    DropsBlockOfPreempted: "lost-block",
    PrefixWithoutRetain: "double-release",
    ForgetsBlocksOnTimeout: "lost-block",
}


@pytest.mark.asyncio
async def test_the_loop_serves_its_traffic() -> None:
    """On plain asyncio every client gets its outcome and the audit finds nothing."""
    assert await serve(Engine) == SERVED


@pytest.mark.asyncio
@pytest.mark.parametrize("engine_type", BUGGY, ids=lambda engine_type: engine_type.__name__)
async def test_each_planted_bug_passes_plain_asyncio(engine_type: type[Engine]) -> None:
    """Each buggy loop serves the same traffic on plain asyncio, audited, without a complaint."""
    assert await serve(engine_type) == SERVED


# strategy="random": the engine steps back to back without sleeping, and PCT, which always runs
# the highest-priority ready task, lets it run step after step while the clients starve. The
# default, "pct", walks at random every other schedule and finds these too, in about twice the
# schedules.
@pytest.mark.kvstress_explore(schedules=200, strategy="random", seed=2026)
@pytest.mark.asyncio
async def test_the_loop_is_clean_under_exploration() -> None:
    """200 controlled schedules of the correct loop: no violation, every client served."""
    outcomes = await serve(Engine)
    assert outcomes[3] == outcomes[7] == "disconnected"


@pytest.mark.parametrize("engine_type", BUGGY, ids=lambda engine_type: engine_type.__name__)
def test_each_planted_bug_is_found_by_exploration(engine_type: type[Engine]) -> None:
    """kvstress.explore finds each planted bug as the audit's violation, within 200 schedules."""
    with pytest.raises(kvstress.InvariantViolation) as caught:
        kvstress.explore(functools.partial(serve, engine_type), schedules=200, strategy="random", seed=0)
    assert caught.value.invariant == FOUND_AS[engine_type]


@pytest.mark.parametrize("seed", [0, 2])
def test_the_default_strategy_finds_a_bug_pct_alone_missed(seed: int) -> None:
    """The default, "pct", walks at random every other schedule: on these seeds PCT alone ran
    200 schedules of the double release on abort without a finding (the engine kept its top
    priority while the clients waited); the walk finds it within 30."""
    with pytest.raises(kvstress.InvariantViolation) as caught:
        kvstress.explore(functools.partial(serve, DoubleReleaseOnAbort), schedules=30, seed=seed)
    assert caught.value.invariant == FOUND_AS[DoubleReleaseOnAbort]


def test_a_found_bug_replays_from_its_schedule() -> None:
    """The failing schedule, replayed, raises the same violation on the same block."""
    fn = functools.partial(serve, DoubleReleaseOnAbort)
    with pytest.raises(kvstress.InvariantViolation) as caught:
        kvstress.explore(fn, schedules=200, strategy="random", seed=1)
    schedule = caught.value.__notes__[-1].split("schedule: ")[1].split()[0]
    with pytest.raises(kvstress.InvariantViolation) as again:
        kvstress.explore(fn, replay=schedule)
    assert _unnumbered(again.value.message) == _unnumbered(caught.value.message)


def _unnumbered(message: str) -> str:
    """The message without asyncio's process-wide task numbers (Task-123)."""
    return re.sub(r"Task-\d+", "Task", message)
