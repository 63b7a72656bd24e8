"""Where each worker was when it was switched out: the pool's source line at every hand-over.

A controlled failure replays exactly, so after it is found its schedule is run once more under
``SwitchRecorder``, a scheduler that passes every call through to a ``ReplayScheduler`` and, at
each decision that hands over to another worker, notes where the worker it pauses stands: its
innermost frame inside the pool's own source files (file, line, and the line's text), and the
operation it is in. The recorder only reads frames; it never changes a choice, so the recorded
run is the failing run.

Threads: ``next_task`` is called on the paused thread itself, so its own stack is walked. The
controlled asyncio loop: the paused task is suspended at an ``await``, and its coroutine chain
(``cr_await``) is walked down to the innermost frame. trio runs are seeded, not steered decision
by decision, so they have no hand-overs to record (``unavailable`` says so).
"""

from __future__ import annotations

import asyncio
import linecache
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any

from kvstress.controlled import current_loop
from kvstress.controlled._baton import active_controller
from kvstress.harness._runner import Suspensions
from kvstress.reports._report import DIVERGED
from kvstress.schedulers import ReplayScheduler, Schedule, ScheduleDivergence


@dataclass(frozen=True)
class Switch:
    """One hand-over: ``worker`` was paused (inside ``operation``, at ``file:line``) and ``to`` ran.

    ``file``, ``line`` and ``source`` are None when the paused worker was outside the pool's code
    (between operations, in the harness, or finished); ``operation`` is None between operations.
    ``blocked``: the worker blocked there (a lock another holds, a wait) and ``to`` was the only
    one that could run, rather than being passed over by the scheduler.
    """

    worker: str
    to: str
    operation: str | None
    op_index: int | None
    file: str | None
    line: int | None
    source: str | None
    blocked: bool = False
    pools_own: bool = False  # ``worker`` is a thread or task the pool started, not a harness worker

    def describe(self) -> str:
        """``b2 in `release(1)`, paused at `mypools.py:57`: `self._free.append(blk)` -> b1``."""
        where = _where(self.operation, self.pools_own)
        if self.file is None:
            at = ", outside the pool's code"
        else:
            verb = "blocked" if self.blocked else "paused"
            at = f", {verb} at `{self.file}:{self.line}`" + (f": `{self.source}`" if self.source else "")
        return f"{self.worker}{where}{at}; {self.to} runs next"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "worker": self.worker,
            "to": self.to,
            "operation": self.operation,
            "op_index": self.op_index,
            "file": self.file,
            "line": self.line,
            "source": self.source,
            "blocked": self.blocked,
            "pools_own": self.pools_own,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Switch:
        """The inverse of ``to_dict`` (a report read back)."""
        return cls(
            str(data.get("worker", "?")),
            str(data.get("to", "?")),
            data.get("operation"),
            data.get("op_index"),
            data.get("file"),
            data.get("line"),
            data.get("source"),
            bool(data.get("blocked", False)),
            bool(data.get("pools_own", False)),
        )


def _where(operation: str | None, pools_own: bool) -> str:
    """Where a paused worker was: in an operation, a thread of the pool's own (which runs no
    harness operation: "between operations" misled a blind user), or between operations."""
    if operation:
        return f" in `{operation}`"
    return " (a thread or task of the pool's own)" if pools_own else " between operations"


HARNESS = "the harness"
"""How controlled thread 0 (``run_threads``'s main: it starts the workers, then drains) reads."""

Lookup = Callable[[int], tuple[str, list[FrameType]]]
"""A task id -> its worker's name and its frames, innermost first (empty: none to read)."""


class SwitchRecorder:
    """A scheduler that replays ``schedule`` and records a ``Switch`` at every hand-over."""

    def __init__(
        self,
        schedule: Schedule | str,
        files: frozenset[str],
        in_flight: Callable[[str], tuple[str, int] | None],
    ) -> None:
        self.inner = ReplayScheduler(schedule)
        self.files = files
        self.in_flight = in_flight  # worker -> (operation text, history index) in flight
        self.switches: list[Switch] = []

    @property
    def finished(self) -> bool:
        """True when the replay consumed every recorded choice."""
        return self.inner.finished

    def new_execution(self) -> bool:
        """As the replayed scheduler."""
        return self.inner.new_execution()

    @property
    def fires_timers(self) -> int:
        """As the inner scheduler."""
        return int(getattr(self.inner, "fires_timers", 0))

    def next_u64(self) -> int:
        """As the replayed scheduler."""
        return self.inner.next_u64()

    def schedule(self) -> Schedule:
        """As the replayed scheduler."""
        return self.inner.schedule()

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        """The recorded choice; a hand-over away from ``current`` is noted first."""
        chosen = self.inner.next_task(runnable, current)
        lookup = _lookup()
        if current is not None and chosen != current and lookup is not None:
            switch = self._switch(lookup, current, chosen, blocked=current not in runnable)
            # A worker between operations and outside the pool (the harness starting workers,
            # a program's sleep) says nothing about the pool: such hand-overs are not listed.
            if switch.operation is not None or switch.file is not None:
                self.switches.append(switch)
        return chosen

    def handed_over(self, paused: int, to: int) -> None:
        """A hand-over with no choice made: ``paused`` blocked (a thread on the baton) or awaited
        (a task on the controlled loop), and ``to`` was the only one that could run. Noted as a
        blocked switch, as ``next_task`` notes one."""
        lookup = _lookup()
        if lookup is not None:
            switch = self._switch(lookup, paused, to, blocked=True)
            if switch.operation is not None or switch.file is not None:
                self.switches.append(switch)

    def _switch(self, lookup: Lookup, paused: int, chosen: int, *, blocked: bool = False) -> Switch:
        worker, frames = lookup(paused)
        to, _ = lookup(chosen)
        inside = next((f for f in frames if f.f_code.co_filename in self.files), None)
        op = self.in_flight(worker)
        file = line = source = None
        if inside is not None:
            file, line = os.path.basename(inside.f_code.co_filename), inside.f_lineno
            source = linecache.getline(inside.f_code.co_filename, line).strip() or None
        return Switch(worker, to, op[0] if op else None, op[1] if op else None, file, line, source, blocked)


def _lookup() -> Lookup | None:
    """How to name a task id and read its frames, for the driver running now."""
    controller = active_controller()
    if controller is not None:
        threads = {t.tid: t for t in controller.threads}
        me = controller.me()

        def thread(tid: int) -> tuple[str, list[FrameType]]:
            # next_task runs on the thread being paused: its own stack is the one to read.
            name = HARNESS if tid == 0 else threads[tid].name if tid in threads else f"thread {tid}"
            if me is None or me.tid != tid:
                return name, []
            return name, _outwards(sys._getframe(1))

        return thread
    try:
        loop = current_loop()
    except RuntimeError:
        return None

    def task(lane: int) -> tuple[str, list[FrameType]]:
        found = loop.task_of_lane(lane)
        if found is None:
            work = loop.work_of_lane(lane)
            if work is not None:
                return f"a call in a thread ({work})", []
            return ("a callback of the loop" if lane == 0 else f"task {lane}"), []
        return found.get_name(), _awaited_frames(found)

    return task


def _outwards(frame: FrameType | None) -> list[FrameType]:
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


_SUSPENSIONS_CODE = Suspensions.__await__.__code__


def _awaited_frames(task: asyncio.Task[Any]) -> list[FrameType]:
    """A suspended task's frames, innermost first: its coroutine chain followed down ``cr_await``."""
    chain: list[FrameType] = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = next(
            (f for f in (getattr(awaited, a, None) for a in ("cr_frame", "gi_frame", "ag_frame")) if f),
            None,
        )
        if frame is not None:
            chain.append(frame)
        awaited = next(
            (w for w in (getattr(awaited, a, None) for a in ("cr_await", "gi_yieldfrom", "ag_await")) if w),
            None,
        )
        if awaited is None and frame is not None and frame.f_code is _SUSPENSIONS_CODE:
            # The harness's suspension counter drives the pool's coroutine by send(), not by
            # ``yield from``: the chain goes on through the coroutine it drives.
            awaited = frame.f_locals.get("coro")
    return chain[::-1]


def unavailable(kind: str, backend: str | None) -> str | None:
    """Why a report of this kind cannot show switch points (None: it can)."""
    if kind == "scenario" and backend == "trio":
        return "not recorded: trio runs are seeded, not steered hand-over by hand-over"
    if kind == "scenario":
        return None
    return {
        "stress": "not recorded: free-running threads or tasks have no schedule to replay",
        "machine": "not recorded: the state machine runs on real threads or a real loop, unscheduled",
        "contract": "not recorded: the contract program is sequential (one worker, no switches)",
    }.get(kind, f"not recorded for {kind} reports")


def record_switches(config: Any, schedule: Schedule | str) -> tuple[Switch, ...] | None:
    """Replay ``schedule`` on ``config`` once, recording every hand-over; None if it diverged."""
    from kvstress.scenarios._execution import ExecutionRecord, run_execution
    from kvstress.scenarios._table import call_text

    files = config.pool_files()
    record = ExecutionRecord()

    def in_flight(worker: str) -> tuple[str, int] | None:
        op = record.ops.history.pending_of(worker) if record.ops is not None else None
        return None if op is None else (call_text(op), op.index)

    recorder = SwitchRecorder(schedule, files, in_flight)
    try:
        run_execution(config, recorder, record)
    except ScheduleDivergence:
        return None
    workers = {op.worker for op in record.history} | {HARNESS}
    return tuple(
        switch if switch.operation or switch.worker in workers else replace(switch, pools_own=True)
        for switch in recorder.switches
    )


def switch_fields(kind: str, backend: str | None, switches: Sequence[Switch] | None) -> dict[str, Any]:
    """A report's ``switches`` (a list, or None) and ``switches_note`` (why there are none)."""
    note = unavailable(kind, backend)
    if note is None and switches is None:
        note = DIVERGED
    elif note is None and not switches:
        note = "none: no worker was paused inside an operation or the pool's code"
    listed = [s.to_dict() for s in switches] if switches else None
    return {"switches": listed, "switches_note": note}
