"""The ``history`` slice: one fixed program of hundreds of rounds, every block taken and given
back, the first handle tried each round (bugs past every search's execution length: a blind
tester's compaction every hundredth release and tenancy counter of eight bits, missed by every
strategy and pool size); then the contract and the long history on a ladder of larger sizes
(size arithmetic: a blind tester's bitmap and ring pools)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstress.cli import main
from kvstress.fuzz import fuzz, load_target
from kvstress.fuzz._contract import (
    CHURN_MIN_ROUNDS,
    CHURN_PAIRS,
    CHURN_ROUNDS,
    LADDER,
    LADDER_ELEMENTS,
    churn_rounds,
    ladder,
)
from kvstress.fuzz._replay import replay_report
from kvstress.fuzz._slices import SliceResult, run_slice
from kvstress.fuzz._target import builds_at
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
    result = run_slice("history", load_target(spec), 0, 0.0, memo={})  # their own size alone
    assert result.finding is None, result.finding and result.finding.violation


def test_the_history_slice_runs_once_after_the_first_pass_and_its_finding_replays(tmp_path: Path) -> None:
    target = load_target("tests.pools.long_history:TenancyByteHandlePool")
    outcome = fuzz(target, budget_s=30, seed=0, report_dir=tmp_path)
    assert outcome.finding is not None and outcome.report is not None
    report = load_report(outcome.report)
    assert report["strategy"] == "history", report["strategy"]
    replayed = replay_report(report, tries=1)
    assert replayed.reproduced and "long history" in replayed.note, replayed


def _ladder(spec: str) -> SliceResult:
    """The history slice, run again (as a fuzz run's later passes do) until its ladder is spent
    or it finds something."""
    target, memo = load_target(spec), {}
    for _ in range(len(LADDER) + 1):
        result = run_slice("history", target, 0, 1.0, memo=memo)
        if result.finding is not None or result.exhausted:
            return result
    raise AssertionError(f"the ladder of {spec} was never spent")


@pytest.mark.parametrize(
    ("name", "size", "invariants"),
    [
        ("BitmapTailMaskPool", 64, ("lost-block", "counter-mismatch")),
        # The contracts come first: past 256 blocks its first take-everything loses the ring.
        ("Ring8BitPool", 257, ("lost-block", "shared-block", "dirty-read", "crash")),
    ],
)
def test_the_ladder_finds_size_arithmetic_that_two_blocks_never_show(
    name: str, size: int, invariants: tuple[str, ...]
) -> None:
    """A bitmap that masks a full last word away (64 blocks) and a ring whose 8-bit counters wrap
    past 256 (257) pass everything on two blocks; the ladder runs the contract on larger sizes,
    then the long history, and the finding names its size."""
    spec = f"tests.pools.sized:{name}"
    assert run_slice("history", load_target(spec), 0, 0.0, memo={}).finding is None  # two blocks
    finding = _ladder(spec).finding
    assert finding is not None, name
    assert finding.num_blocks == size and finding.violation.invariant in invariants, finding.violation


@pytest.mark.parametrize(
    "spec",
    [
        "tests.pools.sized:BitmapPool",
        "tests.pools.sized:RingPool",
        "tests.pools.sized:PowerOfTwoPool",
        "kvstress:ThreadedBlockPool",
        "kvstress:AsyncBlockPool",
    ],
)
def test_correct_pools_come_through_the_whole_ladder(spec: str) -> None:
    result = _ladder(spec)
    assert result.finding is None, result.finding and result.finding.violation
    assert result.exhausted


def test_the_ladder_leaves_out_what_the_pool_refuses_or_cannot_hold() -> None:
    """A size the factory refuses is skipped (``PowerOfTwoPool``: 32 and 64 only are run); one
    whose blocks would pass ``LADDER_ELEMENTS`` is never tried."""
    target = load_target("tests.pools.sized:PowerOfTwoPool")
    assert [size for size in ladder(target) if builds_at(target, size)] == [32, 64]
    big = load_target("kvstress:ThreadedBlockPool", block_shape=(128, 128))
    assert max(ladder(big)) * 128 * 128 <= LADDER_ELEMENTS < max(LADDER) * 128 * 128
    assert ladder(load_target("kvstress:ThreadedBlockPool", num_blocks=64)) == (65, 257)
    assert churn_rounds(2) == churn_rounds(8) == CHURN_ROUNDS
    assert churn_rounds(12) * 12 >= CHURN_PAIRS and churn_rounds(10_000) == CHURN_MIN_ROUNDS


def test_a_ladder_finding_replays_at_its_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = load_target("tests.pools.sized:BitmapTailMaskPool")
    outcome = fuzz(target, budget_s=60, seed=0, mix=("history",), report_dir=tmp_path)
    assert outcome.finding is not None and outcome.report is not None
    report = load_report(outcome.report)
    assert report["strategy"] == "contract", report["strategy"]
    assert report["config"]["num_blocks"] == 64 and report["config"]["run_blocks"] == 2
    assert "blocks 0-63 (never handed out)" in report["message"], report["message"]
    replayed = replay_report(report, tries=1)
    assert replayed.reproduced and "contract" in replayed.note, replayed
    assert main(["replay", str(outcome.report)]) == 1
    assert "64 blocks (larger than the run's --blocks 2" in capsys.readouterr().out
