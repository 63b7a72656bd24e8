"""The serving-like load: a seeded stream of requests with heavy-tailed lengths and drawn hold times.

Both paths of a workload replay the same stream, so any difference between them is the memory
path, not the load.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum

from kvstress._checks import got, non_negative_number, positive_int

# Holds are exponential (memoryless arrivals of the next token), cut at this many means so a
# CI-sized run cannot draw one request that outlasts the rest.
_HOLD_CUT = 10.0


class Phase(StrEnum):
    """Where a request falls in the run: the steady load, the burst on top of it, the recovery after."""

    STEADY = "steady"
    BURST = "burst"
    RECOVERY = "recovery"


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What arrives: ``requests`` steady requests served ``concurrency`` at a time, and a burst.

    Lengths (tokens) are lognormal with median ``max_tokens / 8`` and shape ``sigma`` (1.0 puts
    the P99 near 10x the median: a heavy tail), clipped to ``1..max_tokens``. Each request holds
    its K/V for an exponential time of mean ``hold_ms`` milliseconds (cut at 10 means). With
    ``burst`` > 0, half the steady requests run first, then ``burst`` requests arrive at once,
    then the other half shows the recovery. Raises ValueError naming a bad field.
    """

    requests: int = 200
    concurrency: int = 8
    max_tokens: int = 1024
    sigma: float = 1.0
    hold_ms: float = 50.0
    burst: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int("requests", self.requests)
        positive_int("concurrency", self.concurrency)
        positive_int("max_tokens", self.max_tokens)
        non_negative_number("sigma", self.sigma)
        non_negative_number("hold_ms", self.hold_ms)
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 0:
            raise ValueError(f"burst must be an int >= 0, got {got(self.burst)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {got(self.seed)}")

    @property
    def median_tokens(self) -> float:
        """The median of the length distribution before clipping."""
        return self.max_tokens / 8


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the stream: ``tokens`` to write, then hold for ``hold_s`` seconds."""

    index: int
    phase: Phase
    tokens: int
    hold_s: float


def request_stream(spec: LoadSpec) -> tuple[Request, ...]:
    """The requests of ``spec`` in arrival order; the same seed gives the same stream."""
    rng = random.Random(spec.seed)
    phases = _phases(spec)
    return tuple(
        Request(index, phase, _draw_tokens(rng, spec), _draw_hold(rng, spec))
        for index, phase in enumerate(phases)
    )


def _phases(spec: LoadSpec) -> list[Phase]:
    if spec.burst == 0:
        return [Phase.STEADY] * spec.requests
    before = spec.requests // 2
    return [Phase.STEADY] * before + [Phase.BURST] * spec.burst + [Phase.RECOVERY] * (spec.requests - before)


def _draw_tokens(rng: random.Random, spec: LoadSpec) -> int:
    drawn = rng.lognormvariate(math.log(spec.median_tokens), spec.sigma)
    return min(spec.max_tokens, max(1, round(drawn)))


def _draw_hold(rng: random.Random, spec: LoadSpec) -> float:
    mean_s = spec.hold_ms / 1000
    if mean_s == 0:
        return 0.0
    return min(rng.expovariate(1 / mean_s), _HOLD_CUT * mean_s)
