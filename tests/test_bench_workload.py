"""`kvstress bench workload` end to end: the accounting of both paths, the overload policies, the CLI."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from kvstress.bench import (
    SCHEMA,
    LoadSpec,
    Outcome,
    OverloadPolicy,
    PathReport,
    WorkloadConfig,
    WorkloadReport,
    request_stream,
    run_workload,
)
from kvstress.capacity import load_card
from kvstress.cli import main

TINY = load_card("tiny")  # 256 B per token, 4 KiB blocks, contexts up to 256 tokens (16 blocks)
CLI_TINY = [
    "bench",
    "workload",
    "--model",
    "tiny",
    "--requests",
    "12",
    "--concurrency",
    "3",
    "--hold-ms",
    "1",
]


def _config(policy: OverloadPolicy = OverloadPolicy.QUEUE, **serving: Any) -> WorkloadConfig:
    load = LoadSpec(requests=20, concurrency=4, max_tokens=256, hold_ms=1.0, seed=7)
    return WorkloadConfig(TINY, load, policy=policy, **serving)


@functools.cache
def _burst(policy: OverloadPolicy) -> WorkloadReport:
    """32 requests at once on a pool of 16 blocks, between steady requests served one at a time.

    The pool holds the longest request, so the steady and recovery phases always fit; the
    burst's holds (20 ms on average) overlap, so its demand meets the pool at once.
    """
    load = LoadSpec(requests=20, concurrency=1, max_tokens=256, hold_ms=20.0, burst=32, seed=7)
    config = WorkloadConfig(TINY, load, pool_blocks=16, policy=policy, queue_timeout_s=0.05, max_attempts=200)
    return run_workload(config)


def _check_accounting(path: PathReport | None, requests: int) -> PathReport:
    """Every request ended once; a completed one wrote exactly the tokens it asked for."""
    assert path is not None
    assert len(path.results) == requests
    assert sorted(result.index for result in path.results) == list(range(requests))
    for result in path.completed:
        assert result.tokens_written == result.tokens, result
        assert result.tokens_truncated <= result.tokens_written + result.tokens_redone
    assert sum(path.count(outcome) for outcome in Outcome) == requests
    return path


def _check_pool_whole(path: PathReport) -> None:
    assert path.pool_end is not None
    assert path.pool_end.free_count == path.pool_end.free_ids == path.pool_end.num_blocks
    assert path.pool_end.held == 0 and path.pool_end.double_releases == 0
    assert path.pool_end.whole


def test_steady_load_writes_every_requested_token_on_both_paths() -> None:
    """Without a burst both paths complete every request, writing exactly the tokens requested."""
    report = run_workload(_config())
    requested = sum(request.tokens for request in request_stream(report.config.load))
    assert report.setup.tokens_requested == requested
    for path in (report.pooled, report.per_request):
        checked = _check_accounting(path, 20)
        assert len(checked.completed) == 20
        assert sum(result.tokens_written for result in checked.results) == requested
    assert report.pooled is not None and report.per_request is not None
    _check_pool_whole(report.pooled)
    assert (report.pooled.tensor_allocations, report.per_request.tensor_allocations) == (1, 20)
    assert not report.interrupted


def test_both_paths_replay_the_same_stream() -> None:
    """The pooled and the per-request path serve the same requests with the same lengths."""
    report = run_workload(_config())
    assert report.pooled is not None and report.per_request is not None
    stream = [(request.index, request.tokens) for request in request_stream(report.config.load)]
    assert [(result.index, result.tokens) for result in report.pooled.results] == stream
    assert [(result.index, result.tokens) for result in report.per_request.results] == stream


def test_queue_completes_every_request_through_a_burst() -> None:
    """Queue: the burst waits (and is preempted) but every request completes; the pool ends whole."""
    report = _burst(OverloadPolicy.QUEUE)
    pooled = _check_accounting(report.pooled, 52)
    assert len(pooled.completed) == 52
    assert pooled.total(lambda r: r.waits) > 0
    preempted = [result for result in pooled.results if result.attempts > 1]
    assert all(result.timeouts == result.attempts - 1 for result in preempted)
    _check_pool_whole(pooled)


def test_reject_counts_every_rejection_and_recovers() -> None:
    """Reject: the burst is partly rejected, each rejection counted; the requests after it all complete."""
    report = _burst(OverloadPolicy.REJECT)
    pooled = _check_accounting(report.pooled, 52)
    rejected = pooled.count(Outcome.REJECTED)
    assert rejected > 0
    assert rejected == pooled.to_dict()["outcomes"]["rejected"] == pooled.total(lambda r: r.waits)
    assert all(
        result.phase.value == "burst" for result in pooled.results if result.outcome is Outcome.REJECTED
    )
    assert pooled.phases()["recovery"] == {"requests": 10, "completed": 10}
    _check_pool_whole(pooled)


def test_truncate_counts_the_tokens_it_gives_back() -> None:
    """Truncate: every completed request wrote its tokens; truncated tokens are counted, block by block."""
    report = _burst(OverloadPolicy.TRUNCATE)
    pooled = _check_accounting(report.pooled, 52)
    assert len(pooled.completed) == 52
    for result in pooled.results:
        assert result.tokens_truncated <= result.truncations * TINY.block_shape()[2]
        assert (result.truncations == 0) == (result.tokens_truncated == 0)
    assert pooled.to_dict()["tokens"]["truncated"] == pooled.total(lambda r: r.tokens_truncated)
    _check_pool_whole(pooled)


def test_per_request_path_runs_out_of_memory_in_the_burst_and_recovers() -> None:
    """With as much memory as the pool, the per-request path fails part of the burst as out of memory."""
    report = _burst(OverloadPolicy.QUEUE)
    fresh = _check_accounting(report.per_request, 52)
    assert fresh.count(Outcome.OOM) > 0
    assert all(result.phase.value == "burst" for result in fresh.results if result.outcome is Outcome.OOM)
    assert fresh.phases()["recovery"] == {"requests": 10, "completed": 10}
    assert fresh.tensor_allocations == 52 - fresh.count(Outcome.OOM)


def test_interrupt_returns_what_was_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the first path ends the run with a partial report; no block stays held."""

    def interrupted(threads: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("kvstress.bench._workers._wait", interrupted)
    report = run_workload(_config())
    assert report.interrupted and report.per_request is None
    assert report.pooled is not None and report.pooled.interrupted
    _check_accounting(report.pooled, len(report.pooled.results))
    _check_pool_whole(report.pooled)
    assert report.to_dict()["paths"]["per_request"] is None


def test_cli_prints_the_table_and_writes_json_and_svg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI prints both paths side by side and writes the JSON schema and an SVG plot."""
    out, plot = tmp_path / "run.json", tmp_path / "run.svg"
    assert main([*CLI_TINY, "--json", str(out), "--plot", str(plot)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("") + 1].split() == ["metric", "pooled", "per-request", "pooled/per-request"]
    data = json.loads(out.read_text())
    assert data["schema"] == SCHEMA
    assert set(data) == {"schema", "interrupted", "config", "setup", "paths", "ratios"}
    assert set(data["paths"]) == {"pooled", "per_request"}
    for path in data["paths"].values():
        assert {"requests_per_s", "tokens_per_s", "acquire_latency_s", "memory", "policy", "outcomes"} <= set(
            path
        )
        assert {"p50_s", "p99_s", "p999_s"} <= set(path["acquire_latency_s"])
        assert {"rss_peak_bytes", "rss_final_bytes", "gc", "cuda"} <= set(path["memory"])
        assert path["tokens"]["written_completed"] == path["tokens"]["requested_completed"]
    assert data["paths"]["pooled"]["pool_end"]["whole"] is True
    assert {"requests_per_s", "acquire_p99_s", "rss_peak_bytes"} <= set(data["ratios"])
    assert plot.read_text().startswith("<svg ")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["bench"], "BENCH"),
        (["bench", "workload", "--policy", "drop"], "--policy"),
        (["bench", "workload", "--requests", "0"], "requests"),
        (["bench", "workload", "--model", "nope"], "'nope'"),
        (["bench", "workload", "--model", "tiny", "--max-tokens", "512"], "max_tokens"),
        (["bench", "workload", "--model", "tiny", "--pool-blocks", "2"], "pool_blocks"),
        (["bench", "workload", "--memory-cap-mib", "0"], "--memory-cap-mib"),
        (["bench", "workload", "--device", "nonsense"], "device"),
        (["bench", "workload", "--plot", "latency.png"], "--plot"),
        (["bench", "workload", "--json", "/no/such/folder/run.json"], "--json"),
        (["bench", "workload", "--hold-ms", "x"], "--hold-ms"),
    ],
)
def test_bad_input_exits_2_with_one_error_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input exits 2 with exactly one `kvstress: error:` line naming the problem, no traceback."""
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("kvstress: error: ") and says in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""


def test_an_output_that_is_a_folder_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json naming a folder exits 2 with one line before anything runs."""
    assert main([*CLI_TINY, "--json", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == f"kvstress: error: argument --json: must name a file, got the folder {str(tmp_path)!r}\n"
    )


def test_cli_interrupt_writes_partial_json_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during the run still prints the table and writes the JSON, marked interrupted; exit 130."""

    def interrupted(threads: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("kvstress.bench._workers._wait", interrupted)
    out = tmp_path / "partial.json"
    assert main([*CLI_TINY, "--json", str(out)]) == 130
    captured = capsys.readouterr()
    assert "INTERRUPTED" in captured.out
    assert captured.err == "kvstress: interrupted\n"
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and data["paths"]["per_request"] is None
