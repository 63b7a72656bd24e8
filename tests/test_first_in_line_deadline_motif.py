"""The motif of a waiter first in line whose deadline lands as a block comes back, one other
parked behind it: a release that picks the queue to wake under one lock section and wakes it
under another sends its wake-up to nobody when that waiter leaves in between (Linux's sbitmap
before 26edb30dd1c0, rebuilt blind: missed in 200 s of fuzzing on four seeds before this motif;
behind two parked waiters, as in the other deadline motif, a wake of its queue reaches one of
them and hides the loss)."""

from __future__ import annotations

from dataclasses import replace

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import PARKED_WAIT, SETTLE, motifs
from kvstress.schedulers import DelayBoundedScheduler, PCTScheduler
from tests.pools.wake_queues import WakeQueuesCheckedApartPool, WakeQueuesPool

FIRST = (("acquire", SETTLE),)
BEHIND = (("sleep", SETTLE / 2), ("acquire", PARKED_WAIT))


def _motif() -> object:
    (found,) = [m for m in motifs(2, False) if m.programs[1:] == (FIRST, BEHIND)]
    return found


def test_the_motif_is_run_on_virtual_time_only() -> None:
    assert not any(m.programs[1:] == (FIRST, BEHIND) for m in motifs(2, False, virtual=False))
    assert len(_motif().programs) == 3  # type: ignore[attr-defined]


def test_a_wake_up_sent_to_a_queue_emptied_since_its_check_is_found() -> None:
    config = replace(ScenarioConfig(WakeQueuesCheckedApartPool, False), scenario=_motif())
    for scheduler in (DelayBoundedScheduler(2), PCTScheduler(seed=0)):
        result = search(config, scheduler, max_executions=300, budget_s=60.0, shrink=False)
        assert result.failure is not None, scheduler
        assert result.failure.violation.invariant == "lost-wakeup"


def test_a_pool_that_wakes_where_it_looks_comes_through() -> None:
    config = replace(ScenarioConfig(WakeQueuesPool, False), scenario=_motif())
    for scheduler in (DelayBoundedScheduler(2), PCTScheduler(seed=0), PCTScheduler(seed=1)):
        result = search(config, scheduler, max_executions=300, budget_s=60.0, shrink=False)
        assert result.failure is None, result.failure and result.failure.violation
