"""The worker threads: phase by phase at the load's concurrency, the burst at once, errors raised."""

from __future__ import annotations

import threading
import time

import pytest

from kvstress.bench import LoadSpec, Outcome, Request, RequestResult, request_stream
from kvstress.bench._result import Tally
from kvstress.bench._workers import Serve, serve_all


def _counting_serve(peaks: dict[str, int]) -> Serve:
    """A serve that records, per phase, the most requests it ever had running at once."""
    lock = threading.Lock()
    running: dict[str, int] = {}

    def serve(request: Request, origin: float) -> RequestResult:
        phase = request.phase.value
        with lock:
            running[phase] = running.get(phase, 0) + 1
            peaks[phase] = max(peaks.get(phase, 0), running[phase])
        time.sleep(0.02)
        with lock:
            running[phase] -= 1
        return Tally().result(request, Outcome.COMPLETED, 0.0, 0.0)

    return serve


def test_each_phase_runs_at_its_own_concurrency() -> None:
    """Steady and recovery never pass the concurrency; every request is served once, in order."""
    peaks: dict[str, int] = {}
    serve = _counting_serve(peaks)
    load = LoadSpec(requests=12, concurrency=3, burst=6)
    served = serve_all(serve, request_stream(load), load, sync=lambda: None)
    assert [result.index for result in served.results] == list(range(18))
    assert peaks["steady"] <= 3 and peaks["recovery"] <= 3 and peaks["burst"] <= 6
    assert not served.interrupted and served.wall_s > 0


def test_a_workers_exception_is_raised_in_the_caller() -> None:
    """An exception inside serve stops the phase and is raised by serve_all."""

    def broken(request: Request, origin: float) -> RequestResult:
        raise RuntimeError("boom")

    load = LoadSpec(requests=4, concurrency=2)
    with pytest.raises(RuntimeError, match="boom"):
        serve_all(broken, request_stream(load), load, sync=lambda: None)


def test_sync_runs_before_the_clock_stops() -> None:
    """The sync hook's time is part of the wall time."""
    load = LoadSpec(requests=1, hold_ms=0)
    served = serve_all(
        lambda request, origin: Tally().result(request, Outcome.COMPLETED, 0.0, 0.0),
        request_stream(load),
        load,
        sync=lambda: time.sleep(0.05),
    )
    assert served.wall_s >= 0.05
