"""The swimlane of a failure page: one column per worker, time going down, one box per operation.

It is an HTML grid, not a picture: a box's label is the whole operation and wraps inside its
column, so nothing is cut and the page fits a 1,400-pixel window however many operations there
are (the grid is at most ``MAX_WIDTH_PX`` wide; it grows down, not across).

Marks a reader (or a test) can key on: each operation is a ``<div class="op op-<outcome>">``
holding one ``<div class="bar">`` with its label; the failing operation's bar also has class
``failed`` and ``data-failed="true"`` (red outline, and a ``▼ failed check`` mark); an operation
that never returned has class ``pending`` and ``data-pending="true"`` (dashed, hatched, reaching
the bottom). Lane headers are ``<div class="lane-label">``. Rows are events in order (see
``_event_ranks``): ``data-row`` and ``data-row-end`` (exclusive) on each operation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

MAX_WIDTH_PX = 1300
OUTCOMES = ("ok", "info", "raised", "pending")

CSS = f"""
.timeline{{display:grid;gap:2px 6px;max-width:{MAX_WIDTH_PX}px;font:12px monospace;
 border:1px solid #ddd;padding:4px;background:#fcfcfc}}
.lane-label{{font-weight:bold;background:#f0f0f0;padding:2px 4px;overflow-wrap:anywhere;
 position:sticky;top:0}}
.op{{min-width:0}}
.bar{{border:1px solid #555;border-radius:3px;padding:1px 4px;height:100%;box-sizing:border-box;
 overflow-wrap:anywhere;white-space:normal}}
.op-ok .bar{{background:#9bd3a5}}.op-info .bar{{background:#ffd67a}}
.op-raised .bar{{background:#f4a09a}}.op-other .bar{{background:#cccccc}}
.bar.pending{{border-style:dashed;background:repeating-linear-gradient(45deg,#eee 0 4px,#ccc 4px 6px)}}
.bar.failed{{border:3px solid #d00000}}.failed-marker{{color:#d00000;font-weight:bold}}
.legend span{{display:inline-block;padding:0 6px;margin-right:6px}}
"""


def render_timeline(history: Sequence[Mapping[str, Any]], failed_op: object) -> str:
    """The legend and the grid for ``history`` (a report's operations, as JSON objects)."""
    lanes = _lanes(history)
    rank = _event_ranks(history)
    last = len(rank) + 1  # the row a pending operation reaches
    columns = f"grid-template-columns:repeat({len(lanes)},minmax(0,1fr))"
    parts = [f'<div class="timeline" style="{columns}">']
    parts += [
        f'<div class="lane-label" data-worker="{_e(w)}" style="grid-row:1;grid-column:{i + 1}">{_e(w)}</div>'
        for i, w in enumerate(lanes)
    ]
    parts += [_box(op, lanes.index(_worker(op)) + 1, rank, last, failed_op) for op in history]
    parts.append("</div>")
    note = (
        '<p class="axis">Time goes down: rows are the order in which operations began and '
        "returned, not to scale.</p>"
    )
    return _legend() + note + "\n".join(parts)


def _event_ranks(history: Sequence[Mapping[str, Any]]) -> dict[tuple[float, int, int], int]:
    """Each start and end event -> its row, in the order of events.

    Rows follow events, not times: under virtual time many operations share an instant (or
    differ by ~1e-320), and scaling by time would stack them. At one instant an end comes before
    a start (a worker's next operation begins after its last one ended), and starts keep the
    order they were recorded in (the history index).
    """
    keys = set()
    for op in history:
        index = _index(op)
        start, end = _time(op.get("start")), _time(op.get("end"))
        if start is not None:
            keys.add((start, 1, index))
        if end is not None:
            keys.add((end, 0, index))
    return {key: 2 + n for n, key in enumerate(sorted(keys))}


def _index(op: Mapping[str, Any]) -> int:
    index = op.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else -1


def _box(
    op: Mapping[str, Any],
    column: int,
    rank: Mapping[tuple[float, int, int], int],
    last: int,
    failed_op: object,
) -> str:
    outcome = _text(op.get("outcome"))
    start, end = _time(op.get("start")), _time(op.get("end"))
    pending = outcome == "pending" or end is None
    row = rank[(start, 1, _index(op))] if start is not None else 2
    row_end = 1 + last if pending or end is None else max(rank[(end, 0, _index(op))], row + 1)
    failed = failed_op is not None and op.get("index") == failed_op
    label = op_label(op, outcome)
    group = "op op-" + (outcome if outcome in OUTCOMES else "other")
    classes = ["bar"] + (["pending"] if pending else []) + (["failed"] if failed else [])
    marks = (' data-pending="true"' if pending else "") + (' data-failed="true"' if failed else "")
    marker = '<span class="failed-marker">▼ failed check: </span>' if failed else ""
    return (
        f'<div class="{group}" data-index="{_e(op.get("index"))}" data-row="{row}" data-row-end="{row_end}" '
        f'style="grid-column:{column};grid-row:{row}/{row_end}" title="{_e(_tooltip(op, label))}">'
        f'<div class="{" ".join(classes)}"{marks}>{marker}<span class="label">{_e(label)}</span></div></div>'
    )


def _lanes(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """Workers in order of first appearance; the harness's own lane goes last."""
    order = list(dict.fromkeys(map(_worker, history)))
    return [w for w in order if w != "harness"] + (["harness"] if "harness" in order else [])


def _worker(op: Mapping[str, Any]) -> str:
    return _text(op.get("worker", "?"))


def _time(value: object) -> float | None:
    # bool is an int, but a True "start" is a corrupt report, not a time; NaN has no rank.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def op_label(op: Mapping[str, Any], outcome: str) -> str:
    """``acquire(timeout=0.05) -> 1``, ``release(block=1) ...``, ``check() raised ...``."""
    args = op.get("args") or {}
    shown = (
        ", ".join(f"{k}={_text(v)}" for k, v in args.items()) if isinstance(args, Mapping) else _text(args)
    )
    call = f"{_text(op.get('name', '?'))}({shown})"
    if outcome == "pending":
        return f"{call} ..."
    if outcome == "raised":
        return f"{call} raised {_text(op.get('result'))}"
    if outcome == "info":
        return f"{call} -> {_text(op.get('result'))} (info)"
    return call if op.get("result") is None else f"{call} -> {_text(op.get('result'))}"


def _tooltip(op: Mapping[str, Any], label: str) -> str:
    lines = [f"#{_text(op.get('index'))} {_worker(op)}: {label}"]
    start, end = _seconds(op.get("start")), _seconds(op.get("end"))
    lines.append(f"start {start}, end {end}, outcome {_text(op.get('outcome'))}")
    if op.get("observed"):
        lines.append(f"observed {_text(op.get('observed'))}")
    return "\n".join(lines)


def _legend() -> str:
    swatches = {
        "ok": "background:#9bd3a5",
        "info": "background:#ffd67a",
        "raised": "background:#f4a09a",
        "pending": "background:#eeeeee;border:1px dashed #555555",
    }
    spans = "".join(f'<span style="{style}">{name}</span>' for name, style in swatches.items())
    failed = '<span style="border:3px solid #d00000">failed check (▼)</span>'
    return f'<p class="legend">{spans}{failed}</p>'


def _e(value: object) -> str:
    return escape(_text(value), quote=True)


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _seconds(value: object) -> str:
    """A time in seconds to the nanosecond: a virtual clock that crept a few floats from 0 (steps
    at one instant) reads 0, not 2.08e-322."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{round(value, 9):g}"
    return _text(value)
