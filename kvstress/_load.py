"""How loaded the machine is, for watchdogs that must not call a slow thread a hung one."""

from __future__ import annotations

import os
import time


def load_factor() -> float:
    """How many times over its cores the machine is asked for now: the one-minute load average
    per core, at least 1.0 (also 1.0 where the platform reports no load average)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


STARVED_CAP = 10.0
"""How many times its bound of real time a wait that does not count the time a thread spent
waiting for a core (``RunnableClock``, ``ThreadWatch.at_work_within``) lasts at most: a thread
the OS starves for ever still ends the wait."""


def schedstat(native_id: int) -> tuple[int, int] | None:
    """(nanoseconds on a CPU, nanoseconds runnable but waiting for a core) so far, of a thread of
    this process (Linux's ``/proc/self/task/<id>/schedstat``); None where the platform does not
    show it or the thread is gone."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as sched:
            ran, queued = (int(field) for field in sched.read().split()[:2])
    except (OSError, ValueError):
        return None
    return ran, queued


def queued_ns(native_id: int) -> int | None:
    """Nanoseconds a thread of this process has spent runnable but waiting for a core so far
    (``schedstat``). A watchdog that counts wall time less this does not take a thread the OS
    starved (a loaded machine, a niced test run) for one that hung or spun."""
    seen = schedstat(native_id)
    return None if seen is None else seen[1]


class RunnableClock:
    """Wall seconds since it was made, less the time one thread spent waiting for a core since:
    the time that thread ran or waited on purpose. Plain wall time where the platform does not
    show run queues (``queued_ns``)."""

    def __init__(self, native_id: int | None) -> None:
        self._id = native_id
        self._began = time.monotonic()
        self._queued0 = queued_ns(native_id) if native_id is not None else None

    def wall(self) -> float:
        return time.monotonic() - self._began

    def past(self, bound: float) -> bool:
        """Whether ``bound`` seconds of runnable time have gone by, or ``STARVED_CAP`` times
        ``bound`` of wall time."""
        return self.elapsed() >= bound or self.wall() >= bound * STARVED_CAP

    def elapsed(self) -> float:
        wall = self.wall()
        if self._id is None or self._queued0 is None:
            return wall
        queued = queued_ns(self._id)
        return wall if queued is None else max(0.0, wall - (queued - self._queued0) / 1e9)
