"""The report: latency summaries, the pool's end state, ratios, and the versioned JSON."""

from __future__ import annotations

import json

import pytest

from kvstress.bench import (
    SCHEMA,
    GcSummary,
    Latency,
    LoadSpec,
    Measurements,
    Outcome,
    PathReport,
    Phase,
    PoolEnd,
    RequestResult,
    WorkloadConfig,
    WorkloadReport,
    request_stream,
)
from kvstress.bench._setup import resolve
from kvstress.capacity import load_card

CONFIG = WorkloadConfig(load_card("tiny"), LoadSpec(requests=4, max_tokens=64), device="cpu")
SETUP = resolve(CONFIG, request_stream(CONFIG.load))


def _result(index: int, outcome: Outcome = Outcome.COMPLETED, acquire_s: float = 0.001) -> RequestResult:
    written = 20 if outcome is Outcome.COMPLETED else 0
    return RequestResult(
        index, Phase.STEADY, 20, outcome, written, 0, 0, index * 0.1, acquire_s, 0.5, 1, 0, 0, 0
    )


def _path(
    name: str, results: list[RequestResult], wall_s: float, rss_peak: int, gc_pause_s: float
) -> PathReport:
    gc = GcSummary((1, 0, 0), gc_pause_s, gc_pause_s)
    measured = Measurements(100, rss_peak, rss_peak, "path", 10, 0, None, gc, None)
    end = PoolEnd(8, 8, 8, 0, 0) if name == "pooled" else None
    return PathReport(name, tuple(results), wall_s, measured, 1, end, False)


def test_latency_uses_nearest_ranks() -> None:
    """Latency.of gives observed percentiles, the max and the mean; no values give zeros."""
    summary = Latency.of([0.004, 0.001, 0.003, 0.002])
    assert (summary.p50_s, summary.p99_s, summary.p999_s, summary.max_s) == (0.002, 0.004, 0.004, 0.004)
    assert summary.mean_s == pytest.approx(0.0025)
    assert Latency.of([]) == Latency(0.0, 0.0, 0.0, 0.0, 0.0)


def test_a_pool_is_whole_only_when_every_block_is_free_queued_and_unheld() -> None:
    """PoolEnd.whole needs free_count == free_ids == num_blocks and nothing held."""
    assert PoolEnd(4, 4, 4, 0, 0).whole
    assert not PoolEnd(4, 3, 3, 1, 0).whole and not PoolEnd(4, 4, 3, 0, 0).whole


def test_throughput_counts_completed_requests_only() -> None:
    """requests/s and tokens/s count completed requests; failed ones still count in acquire latency."""
    path = _path("pooled", [_result(0), _result(1), _result(2, Outcome.REJECTED, acquire_s=0.009)], 2.0, 1, 0)
    assert (path.requests_per_s, path.tokens_per_s) == (1.0, 20.0)
    assert path.acquire_latency.max_s == 0.009
    assert path.phases() == {"steady": {"requests": 3, "completed": 2}}


def test_ratios_are_pooled_over_per_request_and_none_on_zero() -> None:
    """Each ratio divides pooled by per-request; a zero denominator or a missing path gives None."""
    pooled = _path("pooled", [_result(0), _result(1)], 1.0, 300, 0.0)
    fresh = _path("per-request", [_result(0)], 1.0, 600, 0.0)
    ratios = WorkloadReport(CONFIG, SETUP, pooled, fresh, False).ratios()
    assert (ratios["requests_per_s"], ratios["rss_peak_bytes"], ratios["gc_pause_s"]) == (2.0, 0.5, None)
    assert set(WorkloadReport(CONFIG, SETUP, pooled, None, True).ratios().values()) == {None}


def test_json_is_versioned_and_serialisable() -> None:
    """to_dict() dumps to JSON with the schema, the config, the setup, both paths and a timeline."""
    pooled = _path("pooled", [_result(0), _result(1, Outcome.GAVE_UP)], 1.0, 300, 0.0)
    data = json.loads(json.dumps(WorkloadReport(CONFIG, SETUP, pooled, None, True).to_dict()))
    assert data["schema"] == SCHEMA and data["interrupted"] is True
    assert data["config"]["policy"] == "queue" and data["config"]["card"]["name"] == "tiny"
    assert data["setup"]["pool_blocks"] == SETUP.pool_blocks
    path = data["paths"]["pooled"]
    assert path["outcomes"] == {"completed": 1, "rejected": 0, "gave_up": 1, "oom": 0}
    assert path["timeline"] == [[0.0, 0.001, "completed"], [0.1, 0.001, "gave_up"]]
    assert path["pool_end"]["whole"] is True and data["paths"]["per_request"] is None
