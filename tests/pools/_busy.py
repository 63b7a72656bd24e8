"""Work a pool's own thread does on the CPU: runnable all along, taking the interpreter lock in turns."""

from __future__ import annotations

import time


def busy_for(seconds: float) -> None:
    """Run Python code for ``seconds`` of real time (a large block zeroed on the CPU)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        sum(range(100))
