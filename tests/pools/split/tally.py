"""A free-block counter in plain Python: this module imports nothing of threading, time or
asyncio, so only its code's lines make it part of a pool's races."""

from __future__ import annotations


class Tally:
    """A count that moves by a delta: read, then write (two lines, a window between)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def add(self, delta: int) -> None:
        seen = self.count
        self.count = seen + delta
