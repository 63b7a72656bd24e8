"""A failing run as a table with one column per worker, in the order things happened (Lincheck's layout).

Each row is one operation, written in its worker's column when it returned (or, for one that
never did, where it began), so reading down the table is reading the interleaving. A result
that came back while other operations of other workers were in flight is how a race looks:
the ``|`` marks in the other columns show which were.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstress._violation import Operation

_CELL = 30  # characters per column


def interleaving_table(
    history: Sequence[Operation], workers: Sequence[str], failed: int | None = None
) -> str:
    """The table (see the module docstring); the harness's own operations get a last column.

    ``failed`` is the index of the operation whose check failed: it is marked, and what the run
    did after it (unwinding) is left out; operations still in flight then show as ``...``.
    """
    if failed is not None and 0 <= failed < len(history):
        history = _cut(history, failed)
    columns = list(workers) + sorted({op.worker for op in history} - set(workers))
    index = {worker: i for i, worker in enumerate(columns)}
    events = sorted(
        (op for op in history if op.worker in index),
        key=lambda op: op.end if op.end is not None else op.start,
    )
    lines = [_row(columns), _row(["-" * _CELL] * len(columns))]
    for op in events:
        at = op.end if op.end is not None else op.start
        in_flight = _columns_ops(history, columns, at)
        cells = ["|" if other.worker != op.worker and _in_flight(other, at) else "" for other in in_flight]
        cells[index[op.worker]] = _cell(op)
        lines.append(_row(cells) + ("  <- failed here" if op.index == failed else ""))
    return "\n".join(lines)


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


def _cell(op: Operation) -> str:
    args = ", ".join(
        f"{v:g}" if isinstance(v, float) else str(v) for k, v in op.args.items() if k != "canary"
    )
    shown = {
        "ok": "" if op.result is None else f" -> {op.result}",
        "info": f" -> {op.result} (info)",
        "pending": " ...",
    }
    text = f"{op.name}({args}){shown.get(op.outcome, ' ' + op.outcome)}"
    if op.outcome == "raised":
        text = f"{op.name}({args}) raised"
    return text if len(text) <= _CELL else text[: _CELL - 1] + "~"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(f"{cell:<{_CELL}}" for cell in cells) + " |"


_IDLE = Operation(-1, "", "", {}, 0.0, 0.0, "ok")
