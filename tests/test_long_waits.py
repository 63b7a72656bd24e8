"""Motifs past the drawn scenarios' shape: a waiter with no time limit parked long (a backoff only
a deadline caps), and four waiters parked at once (a waiter list bounded at three)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstress.fuzz import fuzz, load_target


@pytest.mark.parametrize(
    "twin",
    [
        # The polls sleep ever longer when no deadline caps them: a block freed while the
        # waiter waits a second is taken past ``backoff_bound`` (missed in 10 s on seeds 0-2
        # before the long-parked motif: the short one gives the block back after 0.5 ms).
        "polling_forever:PollingForeverUncappedPool",
        # Four waiters parked at once: the list keeps three, and the first waits beside free
        # blocks (missed in 20 s on seeds 0-2, also with --blocks 4: three workers never park four).
        "bounded_waiters:BoundedWaitersPool",
    ],
)
def test_a_bug_past_the_drawn_scenarios_shape_is_found(tmp_path: Path, twin: str) -> None:
    outcome = fuzz(load_target(f"tests.pools.{twin}"), budget_s=15, seed=0, report_dir=tmp_path)
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant == "lost-wakeup", outcome.finding.violation


@pytest.mark.parametrize("pool", ["polling_forever:PollingForeverPool", "bounded_waiters:HandOffPool"])
def test_their_correct_designs_are_clean(tmp_path: Path, pool: str) -> None:
    """The capped polls and the unbounded waiter list, through the same motifs."""
    outcome = fuzz(load_target(f"tests.pools.{pool}"), budget_s=3, seed=0, report_dir=tmp_path)
    assert outcome.finding is None, outcome.finding and outcome.finding.violation
