"""A failure report as one self-contained HTML page: summary, swimlane timeline, tables, replay.

The page loads nothing: the CSS is inline, the timeline is inline SVG, and there is no script,
so it can be attached to a bug report and opened offline. Every string taken from the report is
escaped with ``html.escape(..., quote=True)``, in SVG text and attributes too, because reports
carry worker names, arguments and exception messages that anyone may have written.

Marks a reader (or a test) can key on: each operation is a ``<g class="op op-<outcome>">``
holding one ``<rect class="bar">``; the failing operation's rect also has class ``failed`` and
``data-failed="true"`` (red outline, and a red triangle above it); an operation that never
returned has class ``pending`` and ``data-pending="true"`` (dashed, hatched, reaching the right
edge). Lane labels are ``<text class="lane-label">``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from kvstress._format import human_seconds

_OUTCOME_FILL = {"ok": "#9bd3a5", "info": "#ffd67a", "raised": "#f4a09a", "pending": "url(#hatch)"}
_OTHER_FILL = "#cccccc"  # an outcome this renderer does not know: still drawn, in grey
_LABEL_W, _STEP, _LANE_H, _BAR_H, _TOP, _PAD = 130, 80, 34, 18, 24, 12
_MIN_RIGHT = 720  # room for the caption however few events there are
_CHAR_W = 6.6  # rough width of one 11px monospace character, to shorten labels to their bar
_LABEL_MAX = 60  # characters of an operation's label, before the tooltip takes over

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.4em;margin-bottom:.2em}.message{font-size:1.1em;color:#a00;margin-top:0}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
th{background:#f3f3f3}pre{background:#f6f6f6;border:1px solid #ddd;padding:8px;overflow-x:auto}
.timeline{overflow-x:auto;border:1px solid #ddd}
.legend span{display:inline-block;padding:0 6px;margin-right:6px}
"""


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page for ``report`` (a parsed ``kvstress.failure/1`` JSON object), as one string.

    ``schema``, ``invariant`` and ``message`` must be present; every other field may be missing
    or None, and its section is then left out or says there is nothing to show.
    """
    invariant, message = _text(report["invariant"]), _text(report["message"])
    history = [op for op in report.get("history") or [] if isinstance(op, Mapping)]
    body = [
        f"<h1>kvstress failure: {_e(invariant)}</h1>",
        f'<p class="message">{_e(message)}</p>',
        _section("Summary", _summary(report)),
        _section("Timeline", _timeline(history, report.get("failed_op")) if history else _none("history")),
        _section("Interleaving", _pre(report.get("table"))) if report.get("table") else "",
        _section("Minimal failing program", _pre(report.get("program"))) if report.get("program") else "",
        _section("Blocks", _blocks(report.get("blocks") or [])),
        _section("Metrics", _json_or_table(report.get("metrics"))),
        _section("Scenario", _pre(json.dumps(report["scenario"], indent=1)))
        if report.get("scenario")
        else "",
        _section("Configuration", _json_or_table(report.get("config"))) if report.get("config") else "",
        _section("Replay", _replay(report)),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kvstress: {_e(invariant)}: {_e(_shorten(message, 80))}</title>"
        f"<style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )


def _e(value: object) -> str:
    return escape(_text(value), quote=True)


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…" if limit > 0 else ""


def _section(title: str, content: str) -> str:
    return f"<section><h2>{_e(title)}</h2>\n{content}\n</section>"


def _pre(text: object) -> str:
    return f"<pre>{_e(text)}</pre>"


def _none(what: str) -> str:
    return f"<p><em>No {_e(what)} recorded.</em></p>"


def _summary(report: Mapping[str, Any]) -> str:
    mode = report.get("mode")
    if mode is not None and report.get("backend") is not None:
        mode = f"{mode} ({report['backend']})"
    elapsed = report.get("elapsed_s")
    rows = {
        "invariant": report["invariant"],
        "pool": report.get("pool"),
        "mode": mode,
        "strategy": report.get("strategy"),
        "seed": report.get("seed"),
        "elapsed": human_seconds(float(elapsed)) if isinstance(elapsed, int | float) else None,
        "reproduced": _reproduction(report.get("reproduction")),
        "versions": _versions(report.get("versions")),
        "created": report.get("created"),
        "schema": report["schema"],
    }
    return _key_values({key: value for key, value in rows.items() if value is not None})


def _reproduction(reproduction: object) -> str | None:
    if not isinstance(reproduction, Mapping):
        return None
    done, total = reproduction.get("reproduced"), reproduction.get("replays")
    if not isinstance(done, int) or not isinstance(total, int) or total <= 0:
        return None
    return f"{done}/{total} replays ({100 * done / total:.0f}%)"


def _versions(versions: object) -> str | None:
    if not isinstance(versions, Mapping) or not versions:
        return None
    return ", ".join(f"{_text(name)} {_text(version)}" for name, version in versions.items())


def _json_or_table(value: object) -> str:
    """A flat key/value table for a mapping; anything else (a list, a number) as JSON."""
    if value is None or isinstance(value, Mapping):
        return _key_values(value or {})
    return _pre(json.dumps(value, indent=1, default=str))


def _key_values(values: Mapping[str, Any]) -> str:
    if not values:
        return _none("values")
    rows = (f"<tr><th>{_e(key)}</th><td>{_e(value)}</td></tr>" for key, value in values.items())
    return '<table class="kv">' + "".join(rows) + "</table>"


def _blocks(blocks: Sequence[Any]) -> str:
    rows = [block for block in blocks if isinstance(block, Mapping)]
    if not rows:
        return _none("blocks")
    head = "".join(f"<th>{name}</th>" for name in ("id", "state", "refcount", "holders", "in free queue"))
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in _block_cells(b)) + "</tr>" for b in rows
    )
    return f'<table class="blocks"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _block_cells(block: Mapping[str, Any]) -> list[object]:
    holders = ", ".join(map(_text, block.get("holders") or []))
    cells = [block.get(key) for key in ("id", "state", "refcount")] + [holders, block.get("in_free_queue")]
    return ["-" if cell is None else cell for cell in cells]


def _replay(report: Mapping[str, Any]) -> str:
    parts = [f'<pre class="replay"><code>{_e(report.get("replay") or "(no replay command)")}</code></pre>']
    if report.get("schedule"):
        parts.append(f'<p>Schedule:</p><pre class="schedule"><code>{_e(report["schedule"])}</code></pre>')
    return "\n".join(parts)


def _lanes(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """Workers in order of first appearance; the harness's own lane goes last."""
    order = list(dict.fromkeys(map(_worker, history)))
    return [w for w in order if w != "harness"] + (["harness"] if "harness" in order else [])


def _timeline(history: Sequence[Mapping[str, Any]], failed_op: object) -> str:
    lanes = _lanes(history)
    # x is the rank of an event time among all distinct start and end times, not the time
    # itself: under virtual time many operations share an instant (or differ by ~1e-320), and
    # scaling by time would stack them into one invisible sliver. Ranks keep the order of
    # events and give every distinct instant the same width.
    times = sorted(
        {t for op in history for t in (_time(op.get("start")), _time(op.get("end"))) if t is not None}
    )
    rank = {t: i for i, t in enumerate(times)}
    right = max(_LABEL_W + _STEP * (len(times) + 1), _MIN_RIGHT)
    width, height = right + _PAD, _TOP + _LANE_H * len(lanes) + _PAD
    parts = [
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eeeeee"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#999999" stroke-width="2"/></pattern></defs>',
        f'<text x="{_LABEL_W}" y="14" fill="#666666">x: order of events (rank of each distinct '
        "start/end time), not to scale</text>",
    ]
    for lane, worker in enumerate(lanes):
        parts.append(_lane(lane, worker, right))
    for op in history:
        lane = lanes.index(_worker(op))
        parts.append(_bar(op, lane, rank, right, failed_op))
    parts.append("</svg>")
    return _legend() + '<div class="timeline">' + "\n".join(parts) + "</div>"


def _worker(op: Mapping[str, Any]) -> str:
    return _text(op.get("worker", "?"))


def _time(value: object) -> float | None:
    # bool is an int, but a True "start" is a corrupt report, not a time; NaN has no rank.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _lane(lane: int, worker: str, right: int) -> str:
    y = _TOP + lane * _LANE_H
    fill = "#fafafa" if lane % 2 else "#f0f0f0"
    return (
        f'<g class="lane" data-worker="{_e(worker)}">'
        f'<rect x="0" y="{y}" width="{right}" height="{_LANE_H}" fill="{fill}"/>'
        f'<text class="lane-label" x="6" y="{y + 23}" font-weight="bold">'
        f"<title>{_e(worker)}</title>{_e(_shorten(worker, 18))}</text></g>"
    )


def _bar(op: Mapping[str, Any], lane: int, rank: Mapping[float, int], right: int, failed_op: object) -> str:
    outcome = _text(op.get("outcome"))
    start, end = _time(op.get("start")), _time(op.get("end"))
    pending = outcome == "pending" or end is None
    x0 = _LABEL_W + _STEP * (rank[start] if start is not None else 0)
    x1 = right if pending or end is None else _LABEL_W + _STEP * rank[end]
    # Equal start and end (one instant) would be zero-wide: give every bar some width.
    w, y = max(x1 - x0, _STEP // 2), _TOP + lane * _LANE_H + 12
    failed = failed_op is not None and op.get("index") == failed_op
    label = _op_label(op, outcome)
    group = "op op-" + (outcome if outcome in _OUTCOME_FILL else "other")
    return (
        f'<g class="{group}" data-index="{_e(op.get("index"))}"><title>{_e(_tooltip(op, label))}</title>'
        + _rect(x0, y, w, _OUTCOME_FILL.get("pending" if pending else outcome, _OTHER_FILL), pending, failed)
        + (_failed_marker(x0, y) if failed else "")
        + f'<text x="{x0 + 3}" y="{y + 13}">{_e(_shorten(label, _fits(w)))}</text></g>'
    )


def _rect(x: int, y: int, w: int, fill: str, pending: bool, failed: bool) -> str:
    classes = ["bar"]
    attrs = [f'x="{x}" y="{y}" width="{w}" height="{_BAR_H}" rx="3" fill="{fill}"']
    if pending:
        classes.append("pending")
        attrs.append('stroke-dasharray="4 3" data-pending="true"')
    if failed:
        classes.append("failed")
        attrs.append('stroke="#d00000" stroke-width="3" data-failed="true"')
    else:
        attrs.append('stroke="#555555" stroke-width="1"')
    return f'<rect class="{" ".join(classes)}" {" ".join(attrs)}/>'


def _fits(width: int) -> int:
    """How many label characters fit in a bar ``width`` pixels wide (the tooltip has the rest)."""
    return max(0, min(int((width - 6) / _CHAR_W), _LABEL_MAX))


def _failed_marker(x: int, y: int) -> str:
    return f'<path class="failed-marker" d="M{x},{y - 10}l10,0l-5,8z" fill="#d00000"/>'


def _op_label(op: Mapping[str, Any], outcome: str) -> str:
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
    lines.append(
        f"start {_text(op.get('start'))}, end {_text(op.get('end'))}, outcome {_text(op.get('outcome'))}"
    )
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
