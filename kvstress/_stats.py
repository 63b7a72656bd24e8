"""Percentiles shared across kvstress: the pool's wait metrics and the benchmark's latencies."""

from __future__ import annotations

import math
from collections.abc import Iterable


def nearest_rank(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by nearest rank; 0.0 when there are none.

    Nearest rank returns a value that was observed, never an interpolation, so a P99 of 200
    samples is the second largest and a P99.9 the largest. Raises ValueError for ``q`` outside
    0..100.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"q must be a percentile between 0 and 100, got {q!r}")
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
