"""Thread CPU time, and wall time, without the garbage collector's or the OS's share.

The busy-wait check judges how much CPU a waiting acquire burns. A cyclic collection can start
in any thread that allocates, and a full one can take a large fraction of a second: counted
against the waiter, it would look like spinning. So collections are timed per thread (through
``gc.callbacks``) and taken out. For the same reason the lateness of an acquire is judged
without the collections that ran meanwhile: no Python code, the pool's included, runs then.

Nor is it judged on the time the OS kept the whole process off the CPU. A loaded machine can
freeze a process for a third of a second in a burst that the one-minute load average never
shows (a CI run launching a browser, say): a correct acquire(timeout=0) then "returns" 0.38 s
late. A heartbeat thread (``_StallMeter``) sleeps in 5 ms ticks while real-time runs read it,
and counts how far each tick overslept, less the tick's collections, less the CPU the process
used meanwhile: an oversleep with the process idle is time no thread of it could run. A pool
that spins holding the GIL delays the heartbeat too, but burns CPU while doing so, and is not
excused.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

_in_gc: dict[int, float] = {}
_gc_cpu: dict[int, float] = {}
_gc_wall = [0.0]  # wall seconds spent in collections by any thread: the GIL stops all others
_wall_started: dict[int, float] = {}
_lock = threading.Lock()

_TICK_S = 0.005  # the heartbeat's sleep
# How far a tick may oversleep on an idle machine without counting (measured here: median
# 0.1 ms, 99th percentile 0.25 ms).
_OVERSLEEP_ALLOWANCE_S = 0.001
_IDLE_EXIT_S = 5.0  # the heartbeat stops this long after its last reader
STALL_METER = "kvstress-stall-meter"  # the heartbeat thread's name


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


class _StallMeter:
    """Seconds the OS kept this process off the CPU, as a heartbeat thread saw them (above)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stalled = 0.0
        self._last_read = 0.0
        self._thread: threading.Thread | None = None
        self._tick: tuple[float, float, float] | None = None  # the tick in progress: wall, CPU, GC
        self._ticking = threading.Event()  # set once the heartbeat's first tick is under way

    def start(self) -> None:
        """Have the heartbeat running and ticking, waiting (at most a second) for its first tick.

        A freeze before the first tick is seen by no one, and starting a thread can itself wait
        out a freeze: so a real-time run starts the meter before its first operation, never
        inside one (``watch_stalls``)."""
        with self._lock:
            self._last_read = time.monotonic()
            thread = None
            if self._thread is None:  # (the heartbeat clears it, under the lock, as it stops)
                self._tick = None
                self._ticking.clear()
                thread = self._thread = threading.Thread(target=self._beat, name=STALL_METER, daemon=True)
        if thread is not None:
            thread.start()
        self._ticking.wait(1.0)

    def seconds(self) -> float:
        """The stalls counted so far; starts the heartbeat if it is not running."""
        if self._thread is None:
            self.start()
        with self._lock:
            self._last_read = time.monotonic()
            # A reader that runs first after a freeze must see it before the heartbeat wakes:
            # the tick in progress counts as far as it has overslept so far.
            return self._stalled + (self._stalled_in(*self._tick) if self._tick else 0.0)

    @staticmethod
    def _stalled_in(wall0: float, cpu0: float, gc0: float) -> float:
        overslept = time.perf_counter() - wall0 - _TICK_S - _OVERSLEEP_ALLOWANCE_S
        return max(0.0, overslept - (_gc_wall[0] - gc0) - (time.process_time() - cpu0))

    def _beat(self) -> None:
        while True:
            tick = time.perf_counter(), time.process_time(), _gc_wall[0]
            with self._lock:
                self._tick = tick
            self._ticking.set()
            time.sleep(_TICK_S)
            with self._lock:
                self._stalled += self._stalled_in(*tick)
                self._tick = None
                if time.monotonic() - self._last_read > _IDLE_EXIT_S:
                    self._thread = None
                    return

    def after_fork(self) -> None:
        """In a forked child: no heartbeat runs there, and the lock may have been held."""
        self._lock = threading.Lock()
        self._ticking = threading.Event()
        self._thread = None
        self._tick = None


_stalls = _StallMeter()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_stalls.after_fork)


def watch_stalls() -> None:
    """Start counting OS stalls now, before a real-time run's first operation (see ``start``)."""
    _stalls.start()


def excused_wall_seconds() -> float:
    """Wall seconds so far in which no Python code of this process could run: garbage
    collections, and stalls the OS imposed (see the module's docstring). Differences of two
    readings bound how much of an interval a slow answer cannot be blamed for."""
    return _gc_wall[0] + _stalls.seconds()
