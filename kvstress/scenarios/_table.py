"""A failing run as a table with one column per worker, in the order things happened (Lincheck's layout).

Each row is one operation, written in its worker's column when it returned (or, for one that
never did, where it began), so reading down the table is reading the interleaving. A result
that came back while other operations of other workers were in flight is how a race looks:
the other columns show which were, each call the first time (``release(0) ...``), then ``|``
marks until its own row. A cell longer than its column wraps onto
more lines of the same row: nothing is cut.

With the failing run's switch points (``Switch``), the table ends with where each worker was
paused at every hand-over, in the order they happened.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Protocol

from kvstress._violation import Operation

_CELL = 30  # characters per column


class _Described(Protocol):
    def describe(self) -> str: ...


def interleaving_table(
    history: Sequence[Operation],
    workers: Sequence[str],
    failed: int | None = None,
    switches: Sequence[_Described] | None = None,
) -> str:
    """The table (see the module docstring); the harness's own operations get a last column.

    ``failed`` is the index of the operation whose check failed: it is marked, and what the run
    did after it (unwinding) is left out; operations still in flight then show as ``...``.
    ``switches`` (the failing run's hand-overs, in order) are listed under the table.
    """
    if failed is not None and 0 <= failed < len(history):
        history = _cut(history, failed)
    columns = list(workers) + sorted({op.worker for op in history} - set(workers))
    index = {worker: i for i, worker in enumerate(columns)}
    events = sorted(
        (op for op in history if op.worker in index),
        key=lambda op: op.end if op.end is not None else op.start,
    )
    lines = _row(columns) + _row(["-" * _CELL] * len(columns))
    begun: set[int] = set()  # the operations whose call a row has shown as begun
    for op in events:
        at = op.end if op.end is not None else op.start
        in_flight = _columns_ops(history, columns, at)
        cells = [
            _in_flight_cell(other, begun) if other.worker != op.worker and _in_flight(other, at) else ""
            for other in in_flight
        ]
        cells[index[op.worker]] = cell_text(op)
        row = _row(cells)
        if op.index == failed:
            row[-1] += "  <- failed here"
        lines += row
    if switches:
        lines.append("switch points (where each worker was paused when another ran):")
        lines += [f"  {n}. {switch.describe()}" for n, switch in enumerate(switches, 1)]
    return "\n".join(lines)


def _in_flight_cell(op: Operation, begun: set[int]) -> str:
    """``op``'s cell in a row while it is in flight: its call, the first time (``release(0)
    ...``), then ``|``: a bar alone did not say which call it was (a blind user's reading)."""
    if op.index in begun:
        return "|"
    begun.add(op.index)
    return f"{call_text(op)} ..."


def _cut(history: Sequence[Operation], failed: int) -> list[Operation]:
    end = history[failed].end
    at = end if end is not None else history[failed].start
    kept = []
    for op in history:
        if op.start > at:
            continue
        if op.index != failed and (op.end is None or op.end > at):
            op = Operation(op.index, op.worker, op.name, op.args, op.start, None, "pending")
        kept.append(op)
    return kept


def _columns_ops(history: Sequence[Operation], columns: Sequence[str], at: float) -> list[Operation]:
    """Per column, an operation of that worker in flight at ``at`` (or a placeholder)."""
    found: dict[str, Operation] = {}
    for op in history:
        if op.worker not in found and _in_flight(op, at):
            found[op.worker] = op
    return [found.get(worker, _IDLE) for worker in columns]


def _in_flight(op: Operation, at: float) -> bool:
    return op is not _IDLE and op.start < at and (op.end is None or op.end > at)


def call_text(op: Operation) -> str:
    """The call alone: ``release(1)``, ``acquire(0.05)`` (the canary written is left out); one
    block's part of a ``release_many``: ``release(1) of a release_many``; a release through a
    handle whose tenancy ended: ``release(1), a double release`` (it read ``release(1, True)``)."""
    args = ", ".join(
        f"{v:g}" if isinstance(v, float) else str(v)
        for k, v in op.args.items()
        if k not in ("canary", "many", "double")
    )
    many = " of a release_many" if op.args.get("many") else ""
    double = ", a double release" if op.args.get("double") else ""
    return f"{op.name}({args}){many}{double}"


def cell_text(op: Operation) -> str:
    """The call and what came of it: ``acquire(0.05) -> 1``, ``release(1) ...``, ``check() raised``."""
    shown = {
        "ok": "" if op.result is None else f" -> {op.result}",
        "info": f" -> {op.result} (info)",
        "pending": " ...",
        "raised": " raised",
    }
    return call_text(op) + shown.get(op.outcome, " " + op.outcome)


def _row(cells: Sequence[str]) -> list[str]:
    """One row as one or more lines: each cell wrapped to the column, none cut."""
    wrapped = [textwrap.wrap(cell, _CELL, break_on_hyphens=False) or [""] for cell in cells]
    height = max((len(lines) for lines in wrapped), default=1)
    lines = []
    for n in range(height):
        parts = [part[n] if n < len(part) else ("|" if part == ["|"] else "") for part in wrapped]
        lines.append("| " + " | ".join(f"{p:<{_CELL}}" for p in parts) + " |")
    return lines


_IDLE = Operation(-1, "", "", {}, 0.0, 0.0, "ok")
