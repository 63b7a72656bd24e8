"""How loaded the machine is, for watchdogs that must not call a slow thread a hung one."""

from __future__ import annotations

import os


def load_factor() -> float:
    """How many times over its cores the machine is asked for now: the one-minute load average
    per core, at least 1.0 (also 1.0 where the platform reports no load average)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))
