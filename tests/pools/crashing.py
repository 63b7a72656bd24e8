"""Correct pools that end their process on their ``DIES_AT``-th release, the ways real pools die.

The count is per process (a class attribute), as a C extension's state or a leak would be: a
fuzzing child dies part way through its run, and a run replayed from its start dies again.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import sys
from typing import Any, ClassVar

from kvstress.mutants import CondvarPool

DIES_AT = 50


class _Dies(CondvarPool):
    releases: ClassVar[int] = 0
    died: ClassVar[bool] = False  # in this process (each subclass its own)

    def release(self, block: Any) -> bool:
        type(self).releases += 1
        # At or past, once: two releases may both count before either compares (these lines
        # are scheduling points), and with ``==`` neither died and the run came out clean.
        if type(self).releases >= DIES_AT and not type(self).died:
            type(self).died = True
            self.die()
        return super().release(block)

    def die(self) -> None:
        raise NotImplementedError


class SegfaultPool(_Dies):
    """A C extension's segfault."""

    def die(self) -> None:
        ctypes.string_at(0)


class ExitPool(_Dies):
    """``os._exit(3)``: no cleanup, no exception."""

    def die(self) -> None:
        os._exit(3)


class SysExitPool(_Dies):
    """``sys.exit(4)``: SystemExit, raised inside a pool call."""

    def die(self) -> None:
        sys.exit(4)


class InterruptPool(_Dies):
    """A KeyboardInterrupt the pool raises itself, with no Ctrl-C anywhere."""

    def die(self) -> None:
        raise KeyboardInterrupt


class GreedyPool(_Dies):
    """Exhausts memory: asks for 64 GiB at once."""

    def die(self) -> None:
        self.hoard = bytearray(64 << 30)


class BlocksForeverPool(_Dies):
    """A release that blocks in a C call for good (a read of a pipe nobody writes), on the
    thread that runs it: a hang, which a watchdog of kvstress's sees."""

    def die(self) -> None:
        read, _write = os.pipe()
        os.read(read, 1)


class HoldsTheGilPool(_Dies):
    """A release that runs for good in a C call that never lets the GIL go: no other thread of
    its process runs again, kvstress's watchdogs included; only the supervisor can end it."""

    def die(self) -> None:
        sum(itertools.repeat(1))


class SegfaultsWhenBuiltPool(CondvarPool):
    """A constructor that segfaults (a C extension, or a device, failing to initialise)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        ctypes.string_at(0)


class ExitHookPool(CondvarPool):
    """Correct, but its constructor registers an exit hook that ends the process with status 5
    (a library's ``atexit`` cleanup that calls ``os._exit``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import atexit

        atexit.register(os._exit, 5)


class SignalsItselfPool(_Dies):
    """Sends its own process SIGTERM, as a library's watchdog that 'restarts' the server does."""

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


class InterruptsItselfPool(_Dies):
    """Sends its own process SIGINT (a Ctrl-C that no user pressed)."""

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)


class InterruptsItselfAtEveryReleasePool(_Dies):
    """Sends its own process SIGINT at every release from the 50th on (a blind tester's: each
    signal started a judge waiting on the supervisor's stop Event; the first one's exit left the
    others counted as sleepers of it, and the supervisor's ``set`` waited for them for ever)."""

    def release(self, block: Any) -> bool:
        if type(self).died:
            os.kill(os.getpid(), signal.SIGINT)
        return super().release(block)

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
