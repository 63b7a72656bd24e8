"""Motifs past the drawn scenarios' shape: a waiter with no time limit parked long (a backoff only
a deadline caps), and four waiters parked at once (a waiter list bounded at three)."""

from __future__ import annotations

from pathlib import Path

from kvstress.fuzz import fuzz, load_target


def test_a_backoff_uncapped_without_a_deadline_is_found(tmp_path: Path) -> None:
    """The twin's polls sleep ever longer when no deadline caps them: a block freed while it
    waits a second is taken past its ``backoff_bound`` (missed in 10 s on seeds 0-2 before the
    long-parked motif: the short one gives the block back after half a millisecond)."""
    outcome = fuzz(
        load_target("tests.pools.polling_forever:PollingForeverUncappedPool"),
        budget_s=15,
        seed=0,
        report_dir=tmp_path,
    )
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant == "lost-wakeup", outcome.finding.violation


def test_the_capped_polling_pool_is_clean(tmp_path: Path) -> None:
    """Its correct design, polls capped at ``backoff_bound``, through the same motif."""
    outcome = fuzz(
        load_target("tests.pools.polling_forever:PollingForeverPool"), budget_s=3, seed=0, report_dir=tmp_path
    )
    assert outcome.finding is None, outcome.finding and outcome.finding.violation


def test_a_waiter_list_bounded_at_three_is_found(tmp_path: Path) -> None:
    """Four waiters parked at once: the list keeps three, and the first waits beside free blocks
    (missed in 20 s on seeds 0-2, also with --blocks 4, where three workers never park four)."""
    outcome = fuzz(
        load_target("tests.pools.bounded_waiters:BoundedWaitersPool"),
        budget_s=15,
        seed=0,
        report_dir=tmp_path,
    )
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant == "lost-wakeup", outcome.finding.violation


def test_the_unbounded_hand_off_pool_is_clean(tmp_path: Path) -> None:
    outcome = fuzz(
        load_target("tests.pools.bounded_waiters:HandOffPool"), budget_s=3, seed=0, report_dir=tmp_path
    )
    assert outcome.finding is None, outcome.finding and outcome.finding.violation
