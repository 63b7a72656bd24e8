"""What serving one request came to: its outcome and its own accounting of tokens and waits."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kvstress.bench._load import Phase, Request


class Outcome(StrEnum):
    """How a request ended. Every request ends in exactly one; only ``completed`` wrote all its tokens."""

    COMPLETED = "completed"
    REJECTED = "rejected"  # reject policy: the pool had no free block
    GAVE_UP = "gave_up"  # queue policy: timed out on every attempt
    OOM = "oom"  # per-request path: the allocation did not fit the memory cap


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One served request. Times are seconds; ``start_s`` counts from the start of its path's run.

    Accounting, for a completed request: ``tokens_written == tokens``, of which
    ``tokens_truncated`` were given back early (truncate policy); a rejected request wrote
    ``tokens_written`` before the pool ran dry, one that gave up or ran out of memory none.
    ``tokens_redone`` were written by attempts that were preempted and count in no request's
    total. ``acquire_s`` is the time the request spent getting memory: every acquire, waits
    included (pooled), or its one allocation (per request).
    """

    index: int
    phase: Phase
    tokens: int
    outcome: Outcome
    tokens_written: int
    tokens_truncated: int
    tokens_redone: int
    start_s: float
    acquire_s: float
    latency_s: float
    attempts: int
    waits: int
    timeouts: int
    truncations: int


@dataclass(slots=True)
class Tally:
    """A request's counters while it is served (one thread); frozen into a RequestResult at the end."""

    written: int = 0
    truncated: int = 0
    redone: int = 0
    acquire_s: float = 0.0
    attempts: int = 0
    waits: int = 0
    timeouts: int = 0
    truncations: int = 0

    def result(self, request: Request, outcome: Outcome, start_s: float, end_s: float) -> RequestResult:
        """The finished request, timed from ``start_s`` to ``end_s`` (both from the path's start)."""
        return RequestResult(
            index=request.index,
            phase=request.phase,
            tokens=request.tokens,
            outcome=outcome,
            tokens_written=self.written,
            tokens_truncated=self.truncated,
            tokens_redone=self.redone,
            start_s=start_s,
            acquire_s=self.acquire_s,
            latency_s=end_s - start_s,
            attempts=self.attempts,
            waits=self.waits,
            timeouts=self.timeouts,
            truncations=self.truncations,
        )
