"""Sections of a failure page rendered for a reader: switch points, blocks and the scenario.

Each takes the parsed report (or one field of it) and returns escaped HTML; anything missing or
malformed renders as a sentence saying so, never as an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

SWITCHES_HEADING = "switch points ("
"""The line that starts the switch list under a text interleaving table (``interleaving_table``)."""

UNSEEN = (
    "unseen: no acquire returned this block in the run, so the harness has no handle to "
    "read its state and refcount through (they show as unseen and -)."
)
"""What ``unseen`` in a block table means (the HTML page sets the word in italics)."""

BLOCK_COLUMNS = ("id", "state", "refcount", "holders", "in free queue", "expected state", "expected refcount")
AT_THE_END = "when the run ended (after the failure, as the run unwound)"
"""The moment a report's blocks show where it names none (``blocks_at``)."""


def table_text(table: object) -> str:
    """The text interleaving table without its switch list (the page shows that on its own)."""
    text = _text(table)
    at = text.find("\n" + SWITCHES_HEADING)
    return text if at < 0 else text[:at]


def switches_section(report: Mapping[str, Any]) -> str:
    """The switch points as a numbered list, or the report's note on why there are none."""
    found = report.get("switches")
    items = [s for s in found if isinstance(s, Mapping)] if isinstance(found, list) else []
    if items:
        intro = (
            '<p class="note">At each hand-over of the failing run, the worker that was paused, the '
            "operation it was in, and its line in the pool's code; the next worker then ran.</p>"
        )
        return intro + '<ol class="switches">' + "".join(f"<li>{_switch(s)}</li>" for s in items) + "</ol>"
    note = report.get("switches_note")
    if note:
        return f'<p class="note">Switch points: {_e(note)}.</p>'
    return "<p><em>No switch points recorded (a report written before they were).</em></p>"


def _switch(switch: Mapping[str, Any]) -> str:
    if switch.get("operation"):
        where = f" in <code>{_e(switch['operation'])}</code>"
    else:
        where = " (a thread or task of the pool's own)" if switch.get("pools_own") else " between operations"
    if switch.get("file"):
        at = f", paused at <code>{_e(switch['file'])}:{_e(switch.get('line'))}</code>"
        if switch.get("source"):
            at += f": <code>{_e(switch['source'])}</code>"
    else:
        at = ", outside the pool's code"
    return (
        f"<strong>{_e(switch.get('worker', '?'))}</strong>{where}{at}; {_e(switch.get('to', '?'))} runs next"
    )


def blocks_section(report: Mapping[str, Any]) -> str:
    """The block table, what moment it shows, what the harness expected, and what unseen means."""
    rows = _block_rows(report)
    if not rows:
        return "<p><em>No blocks recorded.</em></p>"
    head = "".join(f"<th>{name}</th>" for name in BLOCK_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in _block_cells(b)) + "</tr>" for b in rows)
    table = f'<table class="blocks"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    moment = report.get("blocks_at") or AT_THE_END
    notes = [
        f"The blocks {_e(moment)}. State and refcount are read from the pool through the last handle "
        "acquire returned for the block; holders and the expected columns are the harness's own "
        "ledger (a release counts from the moment it is called)."
    ]
    if any(block.get("state") == "unseen" for block in rows):
        notes.append("<em>unseen</em>" + _e(UNSEEN.removeprefix("unseen")))
    return table + "".join(f'<p class="note">{note}</p>' for note in notes)


def blocks_text(report: Mapping[str, Any]) -> str:
    """The block table as text, for ``kvstress report`` (empty: none recorded)."""
    rows = _block_rows(report)
    if not rows:
        return ""
    cells = [list(BLOCK_COLUMNS)] + [[str(cell) for cell in _block_cells(block)] for block in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(BLOCK_COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    moment = report.get("blocks_at") or AT_THE_END
    text = f"blocks {moment} (expected: the harness's ledger):\n" + "\n".join(f"  {line}" for line in lines)
    if any(block.get("state") == "unseen" for block in rows):
        text += "\n  " + UNSEEN
    return text


def _block_rows(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [block for block in report.get("blocks") or [] if isinstance(block, Mapping)]


def _block_cells(block: Mapping[str, Any]) -> list[object]:
    holders = ", ".join(map(_text, block.get("holders") or []))
    keys = ("id", "state", "refcount")
    cells = [block.get(key) for key in keys] + [holders, block.get("in_free_queue")]
    cells += [block.get("expected_state"), block.get("expected_refcount")]
    return ["-" if cell is None else cell for cell in cells]


def scenario_section(scenario: object) -> str:
    """Each worker's program as a row (``b0 | acquire(0.01) share(b1) release``), the JSON folded."""
    folded = (
        "<details><summary>The scenario as JSON (what replay reads)</summary>"
        f'<pre class="wrap">{_e(json.dumps(scenario, indent=1))}</pre></details>'
    )
    programs = _programs(scenario)
    if programs is None:
        return '<p class="note">The scenario is not in a form this page can lay out.</p>' + folded
    rows = "".join(
        f"<tr><th>b{number}</th><td>{_e(' '.join(_step(s) for s in steps))}</td></tr>"
        for number, steps in enumerate(programs)
    )
    head = "<thead><tr><th>worker</th><th>its program, in order</th></tr></thead>"
    return f'<table class="scenario">{head}<tbody>{rows}</tbody></table>' + folded


def _programs(scenario: object) -> list[list[Sequence[Any]]] | None:
    if not isinstance(scenario, list) or not all(isinstance(p, list) for p in scenario):
        return None
    if not all(isinstance(step, list) and len(step) == 2 for program in scenario for step in program):
        return None
    return scenario


def _step(step: Sequence[Any]) -> str:
    """One step as the scenario's own ``describe`` writes it: ``acquire(0.05)``, ``share(b1)``."""
    kind, arg = _text(step[0]), step[1]
    if kind in ("share", "cancel"):
        return f"{kind}(b{_text(arg)})"
    if arg is None:
        return kind
    return f"{kind}({arg:g})" if isinstance(arg, float) else f"{kind}({_text(arg)})"


def _e(value: object) -> str:
    return escape(_text(value), quote=True)


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def pool_size(report: Mapping[str, Any], *, only_larger: bool = False) -> str | None:
    """The size of the pool the finding was made on (``4 blocks``), and, where that was larger
    than the run's ``--blocks`` (a slice that tried a larger pool), that it was; None where the
    report does not say (or, ``only_larger``, where it was the run's own size)."""
    config = report.get("config")
    if not isinstance(config, Mapping):
        return None
    blocks, run_blocks = config.get("num_blocks"), config.get("run_blocks")
    if not _count(blocks):
        return None
    text = f"{blocks} block{'' if blocks == 1 else 's'}"
    if _count(run_blocks) and run_blocks != blocks:
        return f"{text} (larger than the run's --blocks {run_blocks}: some of its slices try larger pools)"
    return None if only_larger else text


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
