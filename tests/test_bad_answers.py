"""What a pool answers where the protocol asks for a count or a list of ids is the pool's, and
a finding: never kvstress's own error (exit 3), never a report that fails to be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstress.cli import main


def _fuzz(tmp_path: Path, pool: str) -> dict[str, object]:
    status = main(["fuzz", "--pool", f"tests.pools.bad_answers:{pool}", "--budget", "20",
                   "--report-dir", str(tmp_path)])  # fmt: skip
    assert status == 1
    [report] = tmp_path.glob("*.json")
    found: dict[str, object] = json.loads(report.read_text())
    return found


def test_free_ids_answering_none_is_the_pools_crash(tmp_path: Path) -> None:
    report = _fuzz(tmp_path, "FreeIdsNonePool")
    assert report["invariant"] == "crash"
    assert "free_ids() returned None, not an iterable of block ids" in str(report["message"])


def test_a_nan_count_is_written_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _fuzz(tmp_path, "FreeCountNanPool")
    assert report["invariant"] == "counter-mismatch", report["message"]
    assert "internal error" not in capsys.readouterr().err
