"""The motif of the blocks back in a row at the instant a second waiter arrives, one parked
already: a waiter that takes up every pending wake-up when it is woken once (a self-pipe drained
whole) leaves the arriving waiter parked beside a free block. No other motif lines the three up:
with both waiters parked before the releases, the kernel wakes both, and the one that finds
the pipe empty still looks at the free list."""

from __future__ import annotations

from dataclasses import replace

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import PARKED_WAIT, SETTLE, motifs
from kvstress.scenarios._programs import Scenario
from kvstress.schedulers import DelayBoundedScheduler
from tests.delay_rounds import found_in_first_delay_rounds
from tests.pools.shared_pipe import SharedPipeDrainsPool, SharedPipePool


def _the_motif(blocks: int) -> Scenario:
    arriving = (("sleep", SETTLE), ("acquire", PARKED_WAIT))
    (found,) = [m for m in motifs(blocks, False) if len(m.programs) == 3 and m.programs[1] == arriving]
    return found


def test_one_delay_finds_a_waiter_that_drains_every_wake_up() -> None:
    config = replace(ScenarioConfig(SharedPipeDrainsPool, False), scenario=_the_motif(2))
    result = search(config, DelayBoundedScheduler(1, woken_first=True), max_executions=500, budget_s=60.0)
    assert result.failure is not None
    assert result.failure.violation.invariant == "lost-wakeup"


def test_a_waiter_that_reads_one_wake_up_comes_through() -> None:
    """Every interleaving with one delay, and the first 400 with two."""
    config = replace(ScenarioConfig(SharedPipePool, False), scenario=_the_motif(2))
    one = DelayBoundedScheduler(1, woken_first=True)
    result = search(config, one, max_executions=2_000, budget_s=120.0)
    assert result.failure is None, result.failure.violation
    assert one.exhausted
    result = search(config, DelayBoundedScheduler(2, woken_first=True), max_executions=400, budget_s=120.0)
    assert result.failure is None, result.failure.violation


def test_the_fuzz_mix_finds_it_in_its_first_delay_rounds() -> None:
    """About 500 executions into the delay strategy, 3 s on the 2-core machine (``delay_rounds``)."""
    finding = found_in_first_delay_rounds("tests.pools.shared_pipe:SharedPipeDrainsPool")
    assert finding is not None
    assert finding.violation.invariant == "lost-wakeup"
