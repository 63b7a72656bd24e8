"""A deadline on the monotonic clock: the helper a utils module keeps."""

from __future__ import annotations

import time


class Deadline:
    """``timeout`` seconds from now; None never expires."""

    __slots__ = ("_end",)

    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left, never negative (None: no limit)."""
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end
