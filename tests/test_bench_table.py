"""The text table: the header says what ran, then one aligned row per metric with both paths and the ratio."""

from __future__ import annotations

import dataclasses

import pytest

from kvstress.bench import LoadSpec, WorkloadConfig, WorkloadReport, run_workload, workload_table
from kvstress.capacity import load_card


@pytest.fixture(scope="module")
def report() -> WorkloadReport:
    load = LoadSpec(requests=6, concurrency=2, max_tokens=64, hold_ms=1, burst=4)
    return run_workload(WorkloadConfig(load_card("tiny"), load, device="cpu"))


def test_the_header_names_the_model_the_load_the_pool_and_the_burst(report: WorkloadReport) -> None:
    """The header lines start with model, load, pool, fresh and burst, then a blank line."""
    lines = workload_table(report).splitlines()
    assert [line.split()[0] for line in lines[:5]] == ["model", "load", "pool", "fresh", "burst"]
    assert lines[5] == "" and "6 requests (+4 at once)" in lines[1]


def test_each_metric_row_shows_both_paths(report: WorkloadReport) -> None:
    """Every row after the title has a value for both paths; rates and latencies have a ratio."""
    lines = workload_table(report).splitlines()
    rows = lines[lines.index("") + 1 :]
    labels = {row.split("  ")[0].strip(): row for row in rows}
    for label in (
        "completed",
        "requests/s",
        "acquire p99",
        "RSS peak",
        "GC pause",
        "burst done",
        "pool at end",
    ):
        assert label in labels, label
    assert labels["completed"].split()[1:] == ["10", "/", "10", "10", "/", "10"]
    assert len(labels["acquire p50"].split("  ")) >= 4
    assert "free, 0 held" in labels["pool at end"]


def test_an_interrupted_run_says_so_and_shows_the_missing_path_as_dashes(report: WorkloadReport) -> None:
    """With no per-request path the table marks the run INTERRUPTED and fills that column with '-'."""
    partial = dataclasses.replace(report, per_request=None, interrupted=True)
    text = workload_table(partial)
    assert "INTERRUPTED" in text
    completed = next(line for line in text.splitlines() if line.startswith("completed"))
    assert completed.split()[-1] == "-"
