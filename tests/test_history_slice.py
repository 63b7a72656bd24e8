"""The ``history`` slice: one fixed program of hundreds of rounds, every block taken and given
back, the first handle tried each round (bugs past every search's execution length: a blind
tester's compaction every hundredth release and tenancy counter of eight bits, missed by every
strategy and pool size)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstress.fuzz import fuzz, load_target
from kvstress.fuzz._replay import replay_report
from kvstress.fuzz._slices import run_slice
from kvstress.reports import load_report


@pytest.mark.parametrize(
    ("name", "invariants"),
    [
        ("CompactsIntoOldListPool", ("lost-block", "counter-mismatch", "crash")),
        ("TenancyByteHandlePool", ("illegal-transition", "refcount", "double-release")),
    ],
)
def test_the_history_slice_finds_a_bug_past_hundreds_of_operations(
    name: str, invariants: tuple[str, ...]
) -> None:
    result = run_slice("history", load_target(f"tests.pools.long_history:{name}"), 0, 30.0, memo={})
    assert result.finding is not None, name
    assert result.finding.violation.invariant in invariants, result.finding.violation


@pytest.mark.parametrize(
    "spec",
    [
        "tests.pools.long_history:CompactingPool",
        "tests.pools.tenancy_handles:TenancyHandlePool",
        "kvstress:ThreadedBlockPool",
        "kvstress:AsyncBlockPool",
    ],
)
def test_correct_pools_come_through_the_history_slice(spec: str) -> None:
    result = run_slice("history", load_target(spec), 0, 30.0, memo={})
    assert result.finding is None, result.finding and result.finding.violation


def test_the_history_slice_runs_once_after_the_first_pass_and_its_finding_replays(tmp_path: Path) -> None:
    target = load_target("tests.pools.long_history:TenancyByteHandlePool")
    outcome = fuzz(target, budget_s=30, seed=0, report_dir=tmp_path)
    assert outcome.finding is not None and outcome.report is not None
    report = load_report(outcome.report)
    assert report["strategy"] == "history", report["strategy"]
    replayed = replay_report(report, tries=1)
    assert replayed.reproduced and "long history" in replayed.note, replayed
