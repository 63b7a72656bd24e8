"""Fuzzing slices: what each strategy reports, and how its time to detect is counted."""

from __future__ import annotations

import time

from kvstress.fuzz import load_target
from kvstress.fuzz._slices import MACHINE_HANG_BOUND, run_slice


def test_the_machine_s_time_to_detect_excludes_shrinking() -> None:
    """As for the controlled strategies, the finding's time stops when the search does: a hang
    shrunk and replayed costs its bound again after that, and is not counted."""
    target = load_target("kvstress.mutants:LockLeakPool")
    start = time.monotonic()
    result = run_slice("machine", target, 0, 5.0)
    wall = time.monotonic() - start
    assert result.finding is not None and result.finding.violation.invariant == "hang"
    assert wall - result.finding.elapsed_s >= MACHINE_HANG_BOUND  # at least the final replay
