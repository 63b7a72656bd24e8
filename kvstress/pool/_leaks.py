"""Leak detection in the manner of Netty's ResourceLeakDetector and HikariCP's leak task.

Every acquire records when and by whom a block was taken. A call stack is captured by level:
DISABLED never, SIMPLE for one acquire in ``sample_rate`` (deterministic, so runs replay),
PARANOID for every acquire. A block held past ``threshold`` seconds is reported once as a leak
suspect; if it is released afterwards, that is reported too.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from types import FrameType

from kvstress._log import get_logger

log = get_logger("kvstress.pool.leaks")


class LeakDetection(Enum):
    """How often an acquire captures its call stack (time and holder are always recorded)."""

    DISABLED = "disabled"
    SIMPLE = "simple"
    PARANOID = "paranoid"


@dataclass(frozen=True, slots=True)
class LeakSuspect:
    """A block held past the leak threshold, as first reported."""

    block_id: int
    holder: str
    held_for_s: float
    stack: str | None


class LeakTracker:
    """Who holds each block since when, and the stacks, watches and reports of leak detection.

    Not thread-safe: the owning pool calls it under its own lock (or from its event loop). The
    time and holder of each block are kept in two preallocated per-block arrays (16 bytes a
    block, no Python object per block); stacks, watches and reports in dicts, for the few
    blocks that have one.

    Invariants: a block is held exactly when ``holders[block]`` is not None; a held block that
    is watched is in exactly one of ``_watch`` (not yet reported) and ``_reported``; ``tracked``
    holds every block with a stack, a watch or a report, so a release of any other block costs
    one set lookup.
    """

    __slots__ = (
        "_countdown",
        "_every",
        "_reported",
        "_stack",
        "_watch",
        "holders",
        "level",
        "returned_count",
        "sample_rate",
        "since",
        "suspect_count",
        "threshold",
        "tracked",
    )

    def __init__(
        self, level: LeakDetection, sample_rate: int, threshold: float | None, num_blocks: int
    ) -> None:
        self.level = level
        self.sample_rate = sample_rate
        self.threshold = threshold
        self.suspect_count = 0
        self.returned_count = 0
        self.since = array("d", bytes(8 * num_blocks))
        self.holders: list[object | None] = [None] * num_blocks
        self.tracked: set[int] = set()
        # A stack is captured when the countdown reaches 0: every acquire (PARANOID), the first
        # of each sample_rate (SIMPLE), never (DISABLED: the countdown starts below 0).
        self._every = {LeakDetection.PARANOID: 1, LeakDetection.SIMPLE: sample_rate}.get(level, 0)
        self._countdown = 1 if self._every else 0
        self._stack: dict[int, _Frames] = {}
        self._watch: OrderedDict[int, None] = OrderedDict()
        self._reported: set[int] = set()

    def on_acquire(self, block_id: int, now: float, holder: object) -> None:
        """Record the time and holder; capture the stack if the level says so."""
        self.since[block_id] = now
        self.holders[block_id] = _UNKNOWN_HOLDER if holder is None else holder
        self._countdown -= 1
        if self._countdown == 0:
            self._countdown = self._every
            self._stack[block_id] = _caller_stack()
            self.tracked.add(block_id)
        if self.threshold is not None:
            self._watch[block_id] = None
            self.tracked.add(block_id)

    def on_acquire_many(self, block_ids: Sequence[int], now: float, holder: object) -> None:
        """``on_acquire`` for a batch: the same records and the same sampled stacks (one walk of
        the stack serves every block of the batch that is sampled). Ids given as a ``range``
        (a run: consecutive, ascending) have their records written as slices."""
        holder = _UNKNOWN_HOLDER if holder is None else holder
        since, holders, tracked = self.since, self.holders, self.tracked
        if type(block_ids) is range:
            first, end = block_ids.start, block_ids.stop
            since[first:end] = array("d", [now]) * len(block_ids)
            holders[first:end] = [holder] * len(block_ids)
        else:
            for block_id in block_ids:
                since[block_id] = now
                holders[block_id] = holder
        if self._every:
            stack = None
            position = self._countdown - 1  # the batch's first sampled block, as one by one
            while position < len(block_ids):
                stack = stack or _caller_stack()
                self._stack[block_ids[position]] = stack
                tracked.add(block_ids[position])
                position += self._every
            self._countdown = position - len(block_ids) + 1
        if self.threshold is not None:
            for block_id in block_ids:
                self._watch[block_id] = None
                tracked.add(block_id)

    def on_release(self, block_id: int, now: float) -> None:
        """Forget the block; report it if it comes back after being reported as a leak."""
        holder = self.holders[block_id]
        self.holders[block_id] = None
        if block_id not in self.tracked:
            return
        self.tracked.discard(block_id)
        self._stack.pop(block_id, None)
        self._watch.pop(block_id, None)
        if block_id in self._reported:
            self._reported.discard(block_id)
            self.returned_count += 1
            log.info(
                "leak_suspect_returned",
                block=block_id,
                holder=describe_holder(holder),
                held_for_s=round(now - self.since[block_id], 6),
            )

    def on_release_many(self, block_ids: Sequence[int], now: float) -> None:
        """``on_release`` for a batch: the sampled or watched blocks get their full record, the
        others only forget their holder (by a slice for a ``range``, as in ``on_acquire_many``)."""
        tracked, holders = self.tracked, self.holders
        if tracked:
            if type(block_ids) is range and len(tracked) < len(block_ids):  # fewer to look at
                hits = sorted(block_id for block_id in tracked if block_id in block_ids)
            else:
                hits = [block_id for block_id in block_ids if block_id in tracked]
            for block_id in hits:
                self.on_release(block_id, now)
        if type(block_ids) is range:
            holders[block_ids.start : block_ids.stop] = [None] * len(block_ids)
            return
        for block_id in block_ids:
            holders[block_id] = None

    def scan(self, now: float) -> list[LeakSuspect]:
        """Report, once each, the blocks held longer than the threshold. Amortised O(1)."""
        if self.threshold is None:
            return []
        found: list[LeakSuspect] = []
        while self._watch:
            block_id = next(iter(self._watch))
            held_for = now - self.since[block_id]
            if held_for < self.threshold:
                break
            del self._watch[block_id]
            self._reported.add(block_id)
            self.suspect_count += 1
            suspect = LeakSuspect(
                block_id,
                describe_holder(self.holders[block_id]),
                held_for,
                _format(self._stack.get(block_id)),
            )
            found.append(suspect)
            log.warning(
                "leak_suspect",
                block=block_id,
                holder=suspect.holder,
                held_for_s=round(held_for, 6),
                stack=suspect.stack,
            )
        return found

    def holder_of(self, block_id: int) -> str | None:
        """Who took the block, or None when it is not held."""
        holder = self.holders[block_id]
        return None if holder is None else describe_holder(holder)

    def acquired_at(self, block_id: int) -> float | None:
        """When the block was taken (the pool's clock), or None when it is not held."""
        return None if self.holders[block_id] is None else self.since[block_id]

    def stack_of(self, block_id: int) -> str | None:
        """The call stack captured at acquire, if one was."""
        return _format(self._stack.get(block_id))


_UNKNOWN_HOLDER = "?"
"""Recorded for a holder given as None, so that ``holders`` still tells a held block."""

_POOL_DIR = os.path.dirname(os.path.abspath(__file__))


_Frames = tuple[tuple[str, int, str], ...]


def _caller_stack(limit: int = 12) -> _Frames:
    """The innermost ``limit`` frames of the code that called into the pool (the pool's own
    left out), as (file, line, function): walking frames costs microseconds, where reading
    their source lines (``traceback.extract_stack``) costs milliseconds the first time each file
    is read. Lines are looked up only when a stack is shown (``_format``)."""
    frames: list[tuple[str, int, str]] = []
    frame: FrameType | None = sys._getframe(1)  # documented; traceback.walk_stack uses it
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        if not code.co_filename.startswith(_POOL_DIR):
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    frames.reverse()
    return tuple(frames)


def _format(frames: _Frames | None) -> str | None:
    """A captured stack as ``traceback.format_list`` shows one, source lines included."""
    if frames is None:
        return None
    summary = traceback.StackSummary.from_list([(path, line, name, None) for path, line, name in frames])
    return "".join(summary.format())


def describe_holder(holder: object) -> str:
    """A readable name for a thread or task record."""
    if holder is None or holder is _UNKNOWN_HOLDER:
        return "?"
    if isinstance(holder, asyncio.Task):
        return f"{holder.get_name()}#{id(holder)}"
    name = getattr(holder, "name", None)
    ident = getattr(holder, "ident", None) or getattr(holder, "id", None)
    if name is None:
        return repr(holder)
    return f"{name}#{ident}" if ident is not None else str(name)
