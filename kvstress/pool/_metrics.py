"""Pool metrics, the seed's five: free, acquired, acquire wait P50/P99, double releases, leak suspects."""

from __future__ import annotations

from collections import deque

from kvstress._stats import nearest_rank


class WaitSamples:
    """The most recent acquire waits (seconds, zero for an acquire served at once), for percentiles."""

    __slots__ = ("_samples",)

    def __init__(self, capacity: int = 4096) -> None:
        self._samples: deque[float] = deque(maxlen=capacity)

    def add(self, waited_s: float) -> None:
        """Record one acquire's wait."""
        self._samples.append(waited_s)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) of recent waits, nearest rank; 0.0 when there are none."""
        return nearest_rank(self._samples, q)
