"""A workload's results: one report per path, side by side, and the JSON they make."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from kvstress._stats import nearest_rank
from kvstress.bench._config import WorkloadConfig
from kvstress.bench._load import Phase
from kvstress.bench._measure import Measurements
from kvstress.bench._result import Outcome, RequestResult
from kvstress.bench._setup import WorkloadSetup

SCHEMA: Final = "kvstress.bench.workload/1"


@dataclass(frozen=True, slots=True)
class Latency:
    """Percentiles (nearest rank), maximum and mean of a set of durations, in seconds."""

    p50_s: float
    p99_s: float
    p999_s: float
    max_s: float
    mean_s: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency:
        """The summary of ``values``; all zeros when there are none."""
        mean = sum(values) / len(values) if values else 0.0
        return cls(
            nearest_rank(values, 50),
            nearest_rank(values, 99),
            nearest_rank(values, 99.9),
            max(values, default=0.0),
            mean,
        )


@dataclass(frozen=True, slots=True)
class PoolEnd:
    """The pool after its path: whole when every block is free and queued, and none is held."""

    num_blocks: int
    free_count: int
    free_ids: int
    held: int
    double_releases: int

    @property
    def whole(self) -> bool:
        """Every block free, queued and unheld."""
        return self.free_count == self.free_ids == self.num_blocks and self.held == 0


@dataclass(frozen=True, slots=True)
class PathReport:
    """One path's run: every request's result, the wall time, what it cost the process.

    ``tensor_allocations`` counts the KV tensors the path made: the pool's one, or one per
    served request. ``pool_end`` is None for the per-request path. ``interrupted`` marks a run
    cut short (its numbers cover the requests that were served).
    """

    name: str
    results: tuple[RequestResult, ...]
    wall_s: float
    measurements: Measurements
    tensor_allocations: int
    pool_end: PoolEnd | None
    interrupted: bool

    def count(self, outcome: Outcome) -> int:
        """Requests that ended in ``outcome``."""
        return sum(1 for result in self.results if result.outcome is outcome)

    def total(self, counter: Callable[[RequestResult], int]) -> int:
        """The sum of ``counter`` over every request (``lambda r: r.waits``)."""
        return sum(counter(result) for result in self.results)

    @property
    def completed(self) -> tuple[RequestResult, ...]:
        """The completed requests."""
        return tuple(result for result in self.results if result.outcome is Outcome.COMPLETED)

    @property
    def requests_per_s(self) -> float:
        """Completed requests per second of wall time."""
        return len(self.completed) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens written by completed requests per second of wall time."""
        written = sum(result.tokens_written for result in self.completed)
        return written / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def acquire_latency(self) -> Latency:
        """Time each request spent getting its memory, failed requests included."""
        return Latency.of([result.acquire_s for result in self.results])

    @property
    def request_latency(self) -> Latency:
        """Start to end of each completed request, hold included."""
        return Latency.of([result.latency_s for result in self.completed])

    def phases(self) -> dict[str, dict[str, int]]:
        """Per phase that occurred: requests, and how many completed."""
        summary: dict[str, dict[str, int]] = {}
        for phase in Phase:
            ran = [result for result in self.results if result.phase is phase]
            if ran:
                done = sum(1 for result in ran if result.outcome is Outcome.COMPLETED)
                summary[phase.value] = {"requests": len(ran), "completed": done}
        return summary

    def to_dict(self) -> dict[str, Any]:
        """The path's summary and its timeline (start, acquire seconds, outcome per request)."""
        return {
            "name": self.name,
            "interrupted": self.interrupted,
            "wall_s": self.wall_s,
            "requests": len(self.results),
            "outcomes": {outcome.value: self.count(outcome) for outcome in Outcome},
            "phases": self.phases(),
            "tokens": {
                "requested": self.total(lambda r: r.tokens),
                "requested_completed": sum(result.tokens for result in self.completed),
                "written_completed": sum(result.tokens_written for result in self.completed),
                "truncated": self.total(lambda r: r.tokens_truncated),
                "redone": self.total(lambda r: r.tokens_redone),
            },
            "requests_per_s": self.requests_per_s,
            "tokens_per_s": self.tokens_per_s,
            "acquire_latency_s": asdict(self.acquire_latency),
            "request_latency_s": asdict(self.request_latency),
            "policy": {
                "waits": self.total(lambda r: r.waits),
                "timeouts": self.total(lambda r: r.timeouts),
                "preemptions": self.total(lambda r: r.attempts - 1),
                "truncations": self.total(lambda r: r.truncations),
            },
            "tensor_allocations": self.tensor_allocations,
            "memory": asdict(self.measurements),
            "pool_end": None
            if self.pool_end is None
            else {**asdict(self.pool_end), "whole": self.pool_end.whole},
            "timeline": [[r.start_s, r.acquire_s, r.outcome.value] for r in self.results],
        }


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    """Both paths of one workload, run one after the other on the same stream.

    A path that never ran (the run was interrupted first) is None.
    """

    config: WorkloadConfig
    setup: WorkloadSetup
    pooled: PathReport | None
    per_request: PathReport | None
    interrupted: bool

    def ratios(self) -> dict[str, float | None]:
        """Pooled divided by per-request, metric by metric; None where a path is missing or divides by 0."""
        pooled, fresh = self.pooled, self.per_request
        return {name: _ratio(pooled, fresh, metric) for name, metric in _RATIOS.items()}

    def to_dict(self) -> dict[str, Any]:
        """The whole report as JSON-ready values, under a versioned ``schema`` key."""
        return {
            "schema": SCHEMA,
            "interrupted": self.interrupted,
            "config": asdict(self.config),
            "setup": self.setup.to_dict(),
            "paths": {
                "pooled": None if self.pooled is None else self.pooled.to_dict(),
                "per_request": None if self.per_request is None else self.per_request.to_dict(),
            },
            "ratios": self.ratios(),
        }


_RATIOS: Final[dict[str, Callable[[PathReport], float]]] = {
    "requests_per_s": lambda path: path.requests_per_s,
    "tokens_per_s": lambda path: path.tokens_per_s,
    "acquire_p50_s": lambda path: path.acquire_latency.p50_s,
    "acquire_p99_s": lambda path: path.acquire_latency.p99_s,
    "acquire_p999_s": lambda path: path.acquire_latency.p999_s,
    "rss_peak_bytes": lambda path: path.measurements.rss_peak_bytes,
    "rss_final_bytes": lambda path: path.measurements.rss_final_bytes,
    "minor_faults": lambda path: path.measurements.minor_faults,
    "gc_pause_s": lambda path: path.measurements.gc.pause_s,
}


def _ratio(
    pooled: PathReport | None, fresh: PathReport | None, metric: Callable[[PathReport], float]
) -> float | None:
    if pooled is None or fresh is None:
        return None
    mine, theirs = metric(pooled), metric(fresh)
    return mine / theirs if theirs else None
