"""Work a pool's own thread does on the CPU: runnable all along, taking the interpreter lock in turns."""

from __future__ import annotations

import threading
import time


def busy_for(seconds: float, until: threading.Event | None = None) -> None:
    """Run Python code for ``seconds`` of real time (a large block zeroed on the CPU), or until
    ``until`` is set."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and not (until is not None and until.is_set()):
        sum(range(100))
