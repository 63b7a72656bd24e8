"""``kvstress report REPORT.json [--html]``: show a failure report again, or re-render its page."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from kvstress.cli._parser import Parser, UsageError
from kvstress.reports import ReportError, load_report, pool_size, replay_line, write_html
from kvstress.reports._sections import blocks_text


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``report``."""
    parser = subparsers.add_parser(
        "report",
        help="print a failure report, or re-render its HTML page",
        allow_abbrev=False,
    )
    parser.add_argument("report", metavar="REPORT.json")
    parser.add_argument(
        "--html", action="store_true", help="write the HTML page beside it and print its path"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the summary, the interleaving and the replay command (or write the HTML)."""
    try:
        report = load_report(args.report)
    except ReportError as error:
        raise UsageError(str(error)) from None
    if args.html:
        page = Path(args.report).with_suffix(".html")
        write_html(report, page)
        print(page)
        return 0
    backend = f"/{report['backend']}" if report.get("backend") else ""
    print(f"[{report['invariant']}] {report['message']}")
    size = pool_size(report)
    print(f"pool: {report['pool']} ({report['mode']}{backend}{', ' + size if size else ''})", end="  ")
    print(f"strategy: {report['strategy']}  seed: {report['seed']}")
    print(f"found after {report['elapsed_s']:.3f} s; versions: {report['versions']}")
    for extra in ("table", "program"):
        if report.get(extra):
            print(f"{extra}:\n{report[extra]}")
    blocks = blocks_text(report)
    if blocks:
        print(blocks)
    if not report.get("switches") and report.get("switches_note"):
        print(f"switch points: {report['switches_note']}")
    if report.get("schedule"):
        print(f"schedule: {report['schedule']}")
    # This file, wherever it is now: the recorded command names where it was written.
    print(
        replay_line({**report, "replay": f"kvstress replay {shlex.quote(str(Path(args.report).resolve()))}"})
    )
    return 0
