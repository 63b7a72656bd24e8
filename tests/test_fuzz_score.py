"""The harness scored on planted bugs: detect(), score(), median_time(), and `kvstress mutants`."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstress.cli import main
from kvstress.fuzz import FuzzOutcome
from kvstress.fuzz import _score as score_module
from kvstress.fuzz._score import Detection, detect, median_time, score
from kvstress.mutants import CORRECT_POOLS, CondvarPool, PartialResetPool, backends_of


def test_a_mutant_is_detected_with_a_declared_id_and_a_time() -> None:
    """PCT finds the partial reset in milliseconds; the detection names the id and the time."""
    found = detect(PartialResetPool, budget_s=5.0)
    assert found.detected and found.invariant == "dirty-read"
    assert found.strategy is not None and found.elapsed_s is not None and found.elapsed_s < 5.0


def test_a_correct_pool_is_not_detected() -> None:
    """Nothing to find: no id, no time."""
    clean = detect(CondvarPool, budget_s=1.0)
    assert clean.invariant is None and not clean.detected and clean.elapsed_s is None


def test_score_and_median_count_only_detections_with_a_declared_id() -> None:
    """A wrong id is not a detection, and its time is not in the median."""
    rows = [
        Detection("a", ("dirty-read",), "dirty-read", "pct", 0.1),
        Detection("b", ("hang",), "crash", "pct", 9.0),  # the wrong id
        Detection("c", ("hang",), "hang", "random", 0.3),
        Detection("d", ("crash",), None, None, None),
    ]
    assert score(rows) == 0.5
    assert median_time(rows) == pytest.approx(0.2)
    assert score([]) == 0.0 and median_time(rows[3:]) is None


def test_ctrl_c_stops_the_score_instead_of_counting_a_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """detect() asks fuzz() to raise on Ctrl-C, so a score stops rather than count a miss."""

    def interrupted_fuzz(*args: object, raise_interrupt: bool = False, **kwargs: object) -> FuzzOutcome:
        if raise_interrupt:
            raise KeyboardInterrupt
        return FuzzOutcome(0, 0, 0.1, interrupted=True)

    monkeypatch.setattr(score_module, "fuzz", interrupted_fuzz)
    with pytest.raises(KeyboardInterrupt):
        detect(PartialResetPool, budget_s=5.0)


def test_the_command_prints_the_table_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One mutant found and the correct pools clean: exit 0, with the row and the score."""
    args = ["--only", "PartialResetPool", "--budget", "5", "--clean-budget", "0.5"]
    status = main(["mutants", *args, "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "PartialResetPool" in out and "mutation score: 1/1 (100%)" in out
    runs = sum(len(backends_of(pool) or ("threads",)) for pool in CORRECT_POOLS)
    assert out.count(": clean (0.5 s)") == runs


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--only", "NoSuchPool"], "--only names unknown mutants: NoSuchPool"),
        (["--budget", "0"], "--budget and --clean-budget must be > 0 seconds"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown names and non-positive budgets are refused before anything runs."""
    status = main(["mutants", *args, "--report-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and says in err and len(err.splitlines()) == 1


def test_compare_times_each_strategy_alone_and_the_naive_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--compare prints one column per strategy and one for the naive test, row by row."""
    args = ["--only", "PartialResetPool", "--budget", "2", "--clean-budget", "0.2", "--compare"]
    main(["mutants", *args, "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("mutant") and "naive" in line)
    assert header.split()[1:] == ["contract", "delay", "machine", "random", "pct", "stress", "naive"]
    row = [line for line in out.splitlines() if line.startswith("PartialResetPool")][-1].split()
    assert len(row) == 8 and row[7] != "-"  # the naive test sees the stale data too
