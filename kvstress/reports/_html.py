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
from collections.abc import Mapping
from html import escape
from typing import Any

from kvstress._format import human_seconds
from kvstress.reports._sections import (
    blocks_section,
    pool_size,
    scenario_section,
    switches_section,
    table_text,
)
from kvstress.reports._timeline import CSS as TIMELINE_CSS
from kvstress.reports._timeline import render_timeline

_CSS = (
    """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1300px}
h1{font-size:1.4em;margin-bottom:.2em}.message{font-size:1.1em;color:#a00;margin-top:0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;
 overflow-wrap:anywhere}
th{background:#f3f3f3}pre{background:#f6f6f6;border:1px solid #ddd;padding:8px;overflow-x:auto}
pre.wrap{white-space:pre-wrap;overflow-wrap:anywhere}.note{color:#555}
ol.switches code{background:#f3f3f3;padding:0 3px}
"""
    + TIMELINE_CSS
)


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
        _section(
            "Timeline", render_timeline(history, report.get("failed_op")) if history else _none("history")
        ),
        _section("Interleaving", _pre(table_text(report.get("table")))) if report.get("table") else "",
        _section("Where each worker was paused", switches_section(report)),
        _section("Minimal failing program", _pre(report.get("program"))) if report.get("program") else "",
        _section("Blocks", blocks_section(report)),
        _section("Metrics", _json_or_table(report.get("metrics"))),
        _section("Scenario", scenario_section(report["scenario"])) if report.get("scenario") else "",
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


def _timeline(report: Mapping[str, Any], history: list[Mapping[str, Any]]) -> str:
    return render_timeline(history, report.get("failed_op")) if history else _none("history")


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
        "pool size": pool_size(report),
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


def _replay(report: Mapping[str, Any]) -> str:
    parts = [f'<pre class="replay"><code>{_e(report.get("replay") or "(no replay command)")}</code></pre>']
    if report.get("schedule"):
        parts.append(f'<p>Schedule:</p><pre class="schedule"><code>{_e(report["schedule"])}</code></pre>')
    return "\n".join(parts)
