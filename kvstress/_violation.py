"""Violations: a stable invariant id, a one-line message, the history and a dump of every block."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Stable ids: reports, tests and users key on them. Never rename one; add new ones at the end.
INVARIANTS: Mapping[str, str] = {
    "dirty-read": "a freshly acquired block's data is not all zeros",
    "shared-block": "a block is held by two holders who did not share it",
    "counter-mismatch": "free_count() differs from the free queue or the FREE blocks when quiet",
    "queue-corruption": "the free queue holds a duplicate, a bad id or a block that is not FREE",
    "lost-block": "a block is neither held nor free, or the pool cannot hand out all its blocks",
    "illegal-transition": "a state change outside the life cycle, or misuse that did not raise",
    "refcount": "a refcount that is wrong for what was done",
    "double-release": "a second release answered other than False (or an exception), or changed the pool",
    "timeout-early": "acquire returned None before its timeout elapsed",
    "timeout-late": "acquire returned later than its deadline plus the backoff bound and slack",
    "busy-wait": "a waiting acquire burned CPU instead of parking",
    "lost-wakeup": "a waiter kept waiting, or timed out, while a block sat free",
    "hang": "an operation did not return within the harness's bound",
    "crash": "the pool raised an exception the protocol does not allow",
}


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation in a history: who did what, when (harness clock, seconds), and what came back.

    ``outcome`` is "ok", "info" (timed out or cancelled: it may or may not have taken effect),
    "raised" (the exception is in ``result``) or "pending" (it never returned).
    """

    index: int
    worker: str
    name: str
    args: Mapping[str, Any]
    start: float
    end: float | None
    outcome: str
    result: Any = None
    observed: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "index": self.index,
            "worker": self.worker,
            "name": self.name,
            "args": dict(self.args),
            "start": self.start,
            "end": self.end,
            "outcome": self.outcome,
            "result": self.result,
            "observed": dict(self.observed),
        }

    def describe(self) -> str:
        """A short line for messages: ``w1: release(block=3) -> True``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        shown = {"ok": repr(self.result), "info": f"{self.result!r} (info)"}.get(self.outcome, self.outcome)
        if self.outcome == "raised":
            shown = f"raised {self.result}"
        return f"{self.worker}: {self.name}({args}) -> {shown}"


@dataclass(frozen=True, slots=True)
class BlockRecord:
    """One block in a dump, as the harness sees it through the protocol."""

    id: int
    state: str
    refcount: int | None
    holders: tuple[str, ...]
    in_free_queue: bool | None
    expected_state: str | None = None  # from the harness's ledger: FREE, ACQUIRED or IN_USE
    expected_refcount: int | None = None  # references the ledger says are held

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "id": self.id,
            "state": self.state,
            "refcount": self.refcount,
            "holders": list(self.holders),
            "in_free_queue": self.in_free_queue,
            "expected_state": self.expected_state,
            "expected_refcount": self.expected_refcount,
        }


class InvariantViolation(AssertionError):
    """A pool broke one of its promises. ``invariant`` is one of the stable ids in INVARIANTS."""

    def __init__(
        self,
        invariant: str,
        message: str,
        history: tuple[Operation, ...] = (),
        blocks: tuple[BlockRecord, ...] = (),
    ) -> None:
        if invariant not in INVARIANTS:
            raise ValueError(f"invariant must be one of {sorted(INVARIANTS)}, got {invariant!r}")
        self.invariant = invariant
        self.message = message
        self.history = history
        self.blocks = blocks
        self.program: str | None = None  # the state machine's steps up to it, when one found it
        super().__init__(f"[{invariant}] {message}")

    def with_context(
        self, history: tuple[Operation, ...], blocks: tuple[BlockRecord, ...]
    ) -> InvariantViolation:
        """The same violation, carrying the history and block dump it was found in."""
        return InvariantViolation(self.invariant, self.message, history, blocks)

    def details(self, last: int = 12) -> str:
        """The message, the last operations and the block table, for a failing test's output.

        Operations are numbered as messages cite them (``operation 65``); one the message cites
        that falls before the last ``last`` is shown too, above them."""
        lines = [str(self)]
        ops = [op for op in self.history if op.name != "check"]  # the harness's own reads
        if ops:
            tail = ops[-last:]
            cited = {int(n) for n in re.findall(r"\boperations? (\d+)", self.message)}
            earlier = [op for op in ops[: len(ops) - len(tail)] if op.index in cited]
            lines.append(
                f"last {len(tail)} of {len(ops)} operations" + (", and those cited:" if earlier else ":")
            )
            lines += [f"  #{op.index} {op.describe()}" for op in (*earlier, *tail)]
        if self.blocks:
            shown, total = self.blocks, len(self.blocks)
            if total > _BLOCK_ROWS:  # a big pool: the blocks that are not plainly free
                shown = tuple(b for b in shown if not _plainly_free(b))[:_BLOCK_ROWS]
            left_out = f" ({len(shown)} of {total}: the first not plainly free)" if len(shown) < total else ""
            lines.append(f"blocks{left_out}:")
            for b in shown:
                queued = {True: "queued", False: "-", None: "?"}[b.in_free_queue]
                held = ",".join(b.holders) or "-"
                lines.append(f"  {b.id:>4} {b.state:<10} ref={b.refcount!s:<4} {queued:<6} held by {held}")
        return "\n".join(lines)


_BLOCK_ROWS = 16
"""Block rows ``details`` shows at most for a big pool."""


def _plainly_free(block: BlockRecord) -> bool:
    return (
        block.state == "FREE"
        and block.in_free_queue is True
        and not block.holders
        and (block.expected_state in (None, "FREE"))
    )
