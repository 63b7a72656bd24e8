"""A thread's trace hook set beside the one already there: coverage's, a debugger's.

A controlled thread schedules at the lines of the traced modules through ``sys.settrace``, and a
stress thread adds its noise the same way. A thread has one trace function, so setting ours put
out the one a tool had set there before: under ``pytest --cov`` (coverage's tracer on Python
3.11, set in every new thread) the lines an explored test ran in its controlled threads read as
never run, and a suite held to ``--cov-fail-under`` failed for it. ``beside`` calls both: the
tool's first (a line that then raises in ours, a run's abort unwinding, still counts as run), ours
after, each with the local trace function it returned for the frame.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

Tracer = Callable[[FrameType, str, Any], Any]


def beside(hook: Tracer, outer: Callable[..., Any] | None) -> Tracer:
    """``hook`` as the thread's trace function, with ``outer`` (the one the thread had: pass
    ``sys.gettrace()``) called too; ``hook`` itself where there was none."""
    if outer is None:
        return hook
    settrace = sys.settrace

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        theirs = outer(frame, event, arg)
        # coverage's C tracer, called as a function at a call, makes itself the thread's hook
        # again (its fast path): take the hook back, or ours is out from the next call on.
        settrace(trace)
        mine = hook(frame, event, arg)
        if mine is None:
            return theirs
        if theirs is None:
            return mine
        local = _both(mine, theirs)
        if frame.f_trace_opcodes:  # ours asked for opcode events here (see ``_trace_call``)
            frame.f_trace = local
        return local

    return trace


def _both(mine: Tracer, theirs: Tracer) -> Tracer:
    """A frame's local trace function calling the tool's and ours, each while it wants events;
    opcode events are ours alone (we asked for them)."""
    mine_now: Tracer | None = mine
    theirs_now: Tracer | None = theirs

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal mine_now, theirs_now
        if theirs_now is not None and event != "opcode":
            theirs_now = theirs_now(frame, event, arg)
        if mine_now is not None:
            mine_now = mine_now(frame, event, arg)
        return local if mine_now is not None or theirs_now is not None else None

    return local
