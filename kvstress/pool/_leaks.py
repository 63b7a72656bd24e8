"""Leak detection in the manner of Netty's ResourceLeakDetector and HikariCP's leak task.

Every acquire records when and by whom a block was taken. A call stack is captured by level:
DISABLED never, SIMPLE for one acquire in ``sample_rate`` (deterministic, so runs replay),
PARANOID for every acquire. A block held past ``threshold`` seconds is reported once as a leak
suspect; if it is released afterwards, that is reported too.
"""

from __future__ import annotations

import os
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

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
    """Acquire records of the held blocks, oldest first, and the suspects already reported.

    Not thread-safe: the owning pool calls it under its own lock (or from its event loop).
    Invariant: a held block is in exactly one of ``_watch`` (not yet reported) and ``_reported``.
    """

    __slots__ = (
        "_acquired",
        "_holder",
        "_reported",
        "_stack",
        "_tick",
        "_watch",
        "level",
        "returned_count",
        "sample_rate",
        "suspect_count",
        "threshold",
    )

    def __init__(self, level: LeakDetection, sample_rate: int, threshold: float | None) -> None:
        self.level = level
        self.sample_rate = sample_rate
        self.threshold = threshold
        self.suspect_count = 0
        self.returned_count = 0
        self._tick = 0
        self._acquired: dict[int, float] = {}
        self._holder: dict[int, object] = {}
        self._stack: dict[int, str] = {}
        self._watch: OrderedDict[int, None] = OrderedDict()
        self._reported: set[int] = set()

    def on_acquire(self, block_id: int, now: float, holder: object) -> None:
        """Record the time and holder; capture the stack if the level says so."""
        self._acquired[block_id] = now
        self._holder[block_id] = holder
        if self._should_capture():
            self._stack[block_id] = _caller_stack()
        if self.threshold is not None:
            self._watch[block_id] = None

    def on_release(self, block_id: int, now: float) -> None:
        """Forget the block; report it if it comes back after being reported as a leak."""
        since = self._acquired.pop(block_id, now)
        holder = self._holder.pop(block_id, None)
        self._stack.pop(block_id, None)
        self._watch.pop(block_id, None)
        if block_id in self._reported:
            self._reported.discard(block_id)
            self.returned_count += 1
            log.info(
                "leak_suspect_returned",
                block=block_id,
                holder=describe_holder(holder),
                held_for_s=round(now - since, 6),
            )

    def scan(self, now: float) -> list[LeakSuspect]:
        """Report, once each, the blocks held longer than the threshold. Amortised O(1)."""
        if self.threshold is None:
            return []
        found: list[LeakSuspect] = []
        while self._watch:
            block_id = next(iter(self._watch))
            held_for = now - self._acquired[block_id]
            if held_for < self.threshold:
                break
            del self._watch[block_id]
            self._reported.add(block_id)
            self.suspect_count += 1
            suspect = LeakSuspect(
                block_id,
                describe_holder(self._holder.get(block_id)),
                held_for,
                self._stack.get(block_id),
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
        if block_id not in self._holder:
            return None
        return describe_holder(self._holder[block_id])

    def acquired_at(self, block_id: int) -> float | None:
        """When the block was taken (the pool's clock), or None when it is not held."""
        return self._acquired.get(block_id)

    def stack_of(self, block_id: int) -> str | None:
        """The call stack captured at acquire, if one was."""
        return self._stack.get(block_id)

    def _should_capture(self) -> bool:
        if self.level is LeakDetection.PARANOID:
            return True
        if self.level is LeakDetection.DISABLED:
            return False
        self._tick += 1
        return self._tick % self.sample_rate == 1 or self.sample_rate == 1


_POOL_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_stack(limit: int = 12) -> str:
    """The stack of the code that called into the pool, without the pool's own frames."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_POOL_DIR)]
    return "".join(traceback.format_list(frames[-limit:]))


def describe_holder(holder: object) -> str:
    """A readable name for a thread or task record."""
    if holder is None:
        return "?"
    name = getattr(holder, "name", None)
    ident = getattr(holder, "ident", None) or getattr(holder, "id", None)
    if name is None:
        return repr(holder)
    return f"{name}#{ident}" if ident is not None else str(name)
