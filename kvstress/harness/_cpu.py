"""Thread CPU time, and wall time, without the garbage collector's share.

The busy-wait check judges how much CPU a waiting acquire burns. A cyclic collection can start
in any thread that allocates, and a full one can take a large fraction of a second: counted
against the waiter, it would look like spinning. So collections are timed per thread (through
``gc.callbacks``) and taken out. For the same reason the lateness of an acquire is judged
without the collections that ran meanwhile: no Python code, the pool's included, runs then.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

_in_gc: dict[int, float] = {}
_gc_cpu: dict[int, float] = {}
_gc_wall = [0.0]  # wall seconds spent in collections by any thread: the GIL stops all others
_wall_started: dict[int, float] = {}
_lock = threading.Lock()


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    ident = threading.get_ident()
    now, wall = time.thread_time(), time.perf_counter()
    if phase == "start":
        _in_gc[ident] = now
        _wall_started[ident] = wall
        return
    started = _in_gc.pop(ident, None)
    wall_started = _wall_started.pop(ident, None)
    with _lock:
        if started is not None:
            _gc_cpu[ident] = _gc_cpu.get(ident, 0.0) + now - started
        if wall_started is not None:
            _gc_wall[0] += wall - wall_started


def watch_gc() -> None:
    """Start timing collections (idempotent)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def gc_wall_seconds() -> float:
    """Wall seconds spent collecting garbage so far, by any thread (no Python code ran then)."""
    return _gc_wall[0]


def thread_cpu_without_gc() -> float:
    """This thread's CPU seconds, less the time it spent collecting garbage."""
    return time.thread_time() - _gc_cpu.get(threading.get_ident(), 0.0)
